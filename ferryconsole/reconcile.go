package ferryconsole

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/ferrydev/ferry/ferryadmin"
	"github.com/ferrydev/ferry/ferrytype"
)

// reconcileIndexPage lists the reconcile checks of each outbox.
type reconcileIndexPage struct {
	Outboxes []reconcileEntry
}

func (reconcileIndexPage) title() string { return "Reconcile" }

// reconcileEntry is what the reconcile page runs on one outbox.
type reconcileEntry struct {
	Name    string
	Checks  []ferryadmin.Check
	Effects []effectEntry
	Window  time.Duration
	// PendingOlderThan is zero when stuck events are not checked.
	PendingOlderThan time.Duration
}

// effectEntry is an effect mapping as shown: the database redacted.
type effectEntry struct {
	Name, Consumer, EventType, Key, Database string
}

func (h *console) reconcileIndex(w http.ResponseWriter, r *http.Request) {
	var p reconcileIndexPage
	for _, n := range keys(h.cfg.Reconcile) {
		o := h.cfg.Reconcile[n]
		e := reconcileEntry{Name: n, Checks: o.Checks, Window: o.Window, PendingOlderThan: o.PendingOlderThan}
		if e.Window == 0 {
			e.Window = ferryadmin.DefaultReconcileWindow
		}
		for _, x := range o.Effects {
			name := x.Name
			if name == "" {
				name = x.Consumer + "." + x.EventType
			}
			db := ferrytype.RedactURL(x.InboxDatabaseURL)
			if x.InboxURLEnv != "" {
				db = "$" + x.InboxURLEnv
			}
			e.Effects = append(e.Effects, effectEntry{Name: name, Consumer: x.Consumer, EventType: x.EventType, Key: x.Key,
				Database: db})
		}
		p.Outboxes = append(p.Outboxes, e)
	}
	h.page(w, r, "reconcile", p)
}

// reconcileRunPage is what a reconcile run found.
type reconcileRunPage struct {
	Name     string
	Report   ferryadmin.ReconcileReport
	Took     time.Duration
	Finished time.Time
}

func (p reconcileRunPage) title() string { return "Reconcile " + p.Name }

func (h *console) reconcileRun(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	o, ok := h.cfg.Reconcile[name]
	if !ok {
		h.fail(w, r, http.StatusNotFound, "Not found", fmt.Sprintf("No reconcile checks are configured for %q.", name))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.RunTimeout)
	defer cancel()
	start := time.Now()
	rep, err := ferryadmin.Reconcile(ctx, h.cfg.Outboxes[name], o)
	took := time.Since(start)
	args := []any{"operator", operator(r), "action", "reconcile", "outbox", name, "took", took.Round(time.Millisecond)}
	if err != nil {
		h.cfg.Logger.Error("console reconcile failed", args...)
		h.failed(w, r, "reconcile of "+name, err)
		return
	}
	h.cfg.Logger.Info("console reconcile", append(args, "findings", rep.Findings)...)
	h.page(w, r, "reconcile_run", reconcileRunPage{Name: name, Report: rep, Took: took.Round(time.Millisecond), Finished: time.Now()})
}
