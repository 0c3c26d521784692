package ferry

import "sync"

// Wakeup carries "new events may be ready" signals from an Outbox to the
// relays of the same process. Give the same Wakeup to both configs. It is
// a hint: a relay that misses one finds the events at its next poll.
type Wakeup struct {
	mu   sync.Mutex
	subs map[chan struct{}]struct{}
}

// NewWakeup returns a Wakeup with no subscribers.
func NewWakeup() *Wakeup { return &Wakeup{subs: map[chan struct{}]struct{}{}} }

// Ring signals every subscribed relay. It never blocks.
func (w *Wakeup) Ring() {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for ch := range w.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (w *Wakeup) subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	w.mu.Lock()
	w.subs[ch] = struct{}{}
	w.mu.Unlock()
	return ch, func() {
		w.mu.Lock()
		delete(w.subs, ch)
		w.mu.Unlock()
	}
}
