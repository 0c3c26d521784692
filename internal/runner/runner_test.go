package runner

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrytype"
)

type key struct{}

func TestRunnerContract(t *testing.T) {
	t.Run("StartKeepsValuesNotCancellation", func(t *testing.T) {
		var r Runner
		ctx, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
		require.NoError(t, r.Start(ctx, nil))
		cancel()
		require.NoError(t, r.Context().Err())
		require.Equal(t, "v", r.Context().Value(key{}))
		require.ErrorIs(t, r.Start(context.Background(), nil), ErrStarted)
		first, err := r.Stop(context.Background(), nil)
		require.True(t, first)
		require.NoError(t, err)
		first, err = r.Stop(context.Background(), nil)
		require.False(t, first)
		require.NoError(t, err)
		require.ErrorIs(t, r.Start(context.Background(), nil), ferrytype.ErrClosed)
	})
	t.Run("StopBeforeStartIsSafeAndFinal", func(t *testing.T) {
		var r Runner
		first, err := r.Stop(context.Background(), nil)
		require.False(t, first)
		require.NoError(t, err)
		require.ErrorIs(t, r.Start(context.Background(), nil), ferrytype.ErrClosed)
	})
	t.Run("FailedStartLeavesItNew", func(t *testing.T) {
		var r Runner
		ended := make(chan struct{})
		boom := errors.New("boom")
		err := r.Start(context.Background(), func(context.Context) error {
			r.Go(func() { <-r.Stopping(); close(ended) })
			return boom
		})
		require.ErrorIs(t, err, boom)
		<-ended // the goroutine it started was stopped
		require.False(t, r.Running())
		require.NoError(t, r.Start(context.Background(), nil))
		_, err = r.Stop(context.Background(), nil)
		require.NoError(t, err)
	})
	t.Run("StopWaitsForGoroutines", func(t *testing.T) {
		var r Runner
		finished := make(chan struct{})
		require.NoError(t, r.Start(context.Background(), func(context.Context) error {
			r.Go(func() { <-r.Stopping(); close(finished) })
			return nil
		}))
		_, err := r.Stop(context.Background(), nil)
		require.NoError(t, err)
		select {
		case <-finished:
		default:
			t.Fatal("Stop returned before its goroutine ended")
		}
		<-r.Done()
	})
	t.Run("StopCancelsWorkWhenItsContextEnds", func(t *testing.T) {
		var r Runner
		release := make(chan struct{})
		require.NoError(t, r.Start(context.Background(), func(ctx context.Context) error {
			r.Go(func() { <-ctx.Done(); <-release })
			return nil
		}))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := r.Stop(ctx, nil)
		require.ErrorIs(t, err, context.Canceled)
		require.Error(t, r.Context().Err())
		select {
		case <-r.Done():
			t.Fatal("Done closed while a goroutine still runs")
		default:
		}
		close(release)
		<-r.Done()
	})
	t.Run("HaltRunsAfterStoppingCloses", func(t *testing.T) {
		var r Runner
		require.NoError(t, r.Start(context.Background(), nil))
		halted := false
		_, err := r.Stop(context.Background(), func() {
			select {
			case <-r.Stopping():
				halted = true
			default:
			}
		})
		require.NoError(t, err)
		require.True(t, halted)
	})
	t.Run("SleepEndsAtStop", func(t *testing.T) {
		var r Runner
		require.NoError(t, r.Start(context.Background(), nil))
		res := make(chan bool)
		go func() { res <- r.Sleep(time.Hour) }()
		_, err := r.Stop(context.Background(), nil)
		require.NoError(t, err)
		require.False(t, <-res)
	})
}
