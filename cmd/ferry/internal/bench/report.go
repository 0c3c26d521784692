package bench

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// figureOf returns the drain of n relays in fs, ordered or not.
func figureOf(fs []RelayFigure, n int, ordered bool) (RelayFigure, bool) {
	for _, f := range fs {
		if f.Relays == n && f.Ordered == ordered {
			return f, true
		}
	}
	return RelayFigure{}, false
}

// largest is the drain with the most relays in fs, ordered or not.
func largest(fs []RelayFigure, ordered bool) (RelayFigure, bool) {
	var best RelayFigure
	for _, f := range fs {
		if f.Ordered == ordered && f.Relays >= best.Relays {
			best = f
		}
	}
	return best, best.Relays > 0
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// plainRatios compares ferry, in the bench's process and as processes,
// with the plain relay measured in the same run: rates, CPU per event of
// each party, and live latency.
func (r *Report) plainRatios() []Ratio {
	var out []Ratio
	add := func(name string, v float64) { out = append(out, Ratio{Name: name, Value: v}) }
	for _, p := range r.Plain {
		for _, side := range []struct {
			name string
			fs   []RelayFigure
		}{{"in-process", r.Relay}, {"process", r.RelayProcess}} {
			f, ok := figureOf(side.fs, p.Relays, false)
			if !ok || p.Rate <= 0 {
				continue
			}
			add(fmt.Sprintf("ferry (%d, %s) / plain (%d loops), rate", f.Relays, side.name, p.Relays), f.Rate/p.Rate)
			if f.Statements.PerEvent != nil && p.Statements.PerEvent != nil && *p.Statements.PerEvent > 0 {
				add(fmt.Sprintf("ferry (%d, %s) / plain (%d loops), statements per event", f.Relays, side.name, p.Relays),
					*f.Statements.PerEvent / *p.Statements.PerEvent)
			}
			for _, party := range []struct {
				name       string
				ferry, own *float64
			}{{"db", f.CPU.DB, p.CPU.DB}, {"broker", f.CPU.Broker, p.CPU.Broker}, {"relay", f.CPU.Relay, p.CPU.Relay}} {
				if party.ferry != nil && party.own != nil && *party.own > 0 {
					add(fmt.Sprintf("ferry (%d, %s) / plain (%d loops), %s CPU per event", f.Relays, side.name, p.Relays, party.name),
						*party.ferry / *party.own)
				}
			}
		}
	}
	if pl := r.LivePlain; pl != nil && pl.P99 > 0 {
		for _, l := range []*LiveResult{r.Live, r.LiveProcess} {
			if l != nil {
				add(fmt.Sprintf("live %s / plain, commit→delivery p50", l.Mode), float64(l.P50)/float64(max(pl.P50, 1)))
				add(fmt.Sprintf("live %s / plain, commit→delivery p99", l.Mode), float64(l.P99)/float64(pl.P99))
			}
		}
	}
	return out
}

// targets lists the goals for the relay as users deploy it, each with
// the figure of this run: ferry relay processes where the run had a ferry
// binary, else the relays in the bench's process (said in the note).
func (r *Report) targets() []Ratio {
	dialect, _, _ := strings.Cut(r.Database, " ")
	deployed, how := r.RelayProcess, "ferry relay processes"
	if len(deployed) == 0 {
		deployed, how = r.Relay, "relays in the bench's process (no ferry binary)"
	}
	if len(deployed) == 0 {
		how = "the relay scenario did not run"
	}
	var out []Ratio
	add := func(name string, v float64, ok bool, target float64, atMost bool, note string) {
		x := Ratio{Name: name, Target: target, AtMost: atMost, Note: note}
		if !ok {
			if x.Note == "" {
				x.Note = "not measured"
			}
			out = append(out, x)
			return
		}
		x.Value = v
		met := v >= target
		if atMost {
			met = v <= target
		}
		x.Met = &met
		out = append(out, x)
	}
	lp := r.LiveProcess
	p50Target := 10.0
	if dialect == "postgres" {
		p50Target = 5
	}
	add(fmt.Sprintf("live, ferry relay process with defaults: commit→delivery p50, ms (%s)", dialect),
		func() float64 {
			if lp == nil {
				return 0
			}
			return msOf(lp.P50)
		}(), lp != nil, p50Target, true, "")
	pl := r.LivePlain
	add("live p99, ferry relay process / plain relay polling every 10ms", func() float64 {
		if lp == nil || pl == nil || pl.P99 <= 0 {
			return 0
		}
		return float64(lp.P99) / float64(pl.P99)
	}(), lp != nil && pl != nil && pl.P99 > 0, 1, true, "")
	idleQ := r.Idle != nil && r.Idle.QueriesPerSecond != nil
	add("idle ferry relay process: queries/s", func() float64 {
		if !idleQ {
			return 0
		}
		return *r.Idle.QueriesPerSecond
	}(), idleQ, 20, true, "counted by the database server")
	add("idle ferry relay process: % of a core", func() float64 {
		if r.Idle == nil {
			return 0
		}
		return r.Idle.CPUPercent
	}(), r.Idle != nil, 1, true, "")
	// The targets are set for 4 relays; other counts stand in when 4 did
	// not run.
	f, okF := figureOf(deployed, 4, false)
	if !okF {
		f, okF = largest(deployed, false)
	}
	p, okP := figureOf(r.Plain, f.Relays, false)
	relays := fmt.Sprintf("%d relays", f.Relays)
	if !okF {
		relays = "the most relays"
	}
	add("drain, "+relays+" / plain relay (as many loops)", f.Rate/max(p.Rate, 1e-9), okF && okP, 1, false, how)
	add("drain, "+relays+" / raw claim+mark", f.Rate/max(r.RawDB, 1e-9), okF && r.RawDB > 0, 0.8, false, how)
	cpuOK := okF && okP && f.CPU.DB != nil && p.CPU.DB != nil && *p.CPU.DB > 0
	add(fmt.Sprintf("database CPU per event, %s / plain relay (%s)", relays, dialect), func() float64 {
		if !cpuOK {
			return 0
		}
		return *f.CPU.DB / *p.CPU.DB
	}(), cpuOK, 1.1, true, how)
	relayCPUOK := okF && okP && f.CPU.Relay != nil && p.CPU.Relay != nil && *p.CPU.Relay > 0
	add(fmt.Sprintf("relay CPU per event, %s / plain relay", relays), func() float64 {
		if !relayCPUOK {
			return 0
		}
		return *f.CPU.Relay / *p.CPU.Relay
	}(), relayCPUOK, 1.3, true, how)
	add("drain, "+relays+" / raw publish", f.Rate/max(r.RawBroker, 1e-9), okF && r.RawBroker > 0, 0.5, false,
		how+"; the target is for PostgreSQL → RabbitMQ quorum")
	o, okO := figureOf(deployed, f.Relays, true)
	add("ordered / unordered, "+relays, o.Rate/max(f.Rate, 1e-9), okO && okF && o.Relays == f.Relays, 0.6, false,
		how+fmt.Sprintf("; %d aggregates", max(min(r.Aggregates, r.Events), 1)))
	for _, ordered := range []bool{false, true} {
		f8, ok8 := figureOf(deployed, 8, ordered)
		f4, ok4 := figureOf(deployed, 4, ordered)
		note := how
		if !ok8 || !ok4 {
			note = "run with --relays 1,4,8"
		}
		name := "drain, 8 relays / 4 relays"
		if ordered {
			name = "drain, ordered, 8 relays / 4 relays"
		}
		add(name, f8.Rate/max(f4.Rate, 1e-9), ok8 && ok4, 1, false, note)
	}
	ordCPUOK := okO && okF && o.Relays == f.Relays && o.CPU.DB != nil && f.CPU.DB != nil && *f.CPU.DB > 0
	add("database CPU per event, ordered / unordered, "+relays, func() float64 {
		if !ordCPUOK {
			return 0
		}
		return *o.CPU.DB / *f.CPU.DB
	}(), ordCPUOK, 2, true, how)
	return out
}

// writeDeployed writes the figures of the relay as deployed and of the
// plain relay, next to the bench's own.
func (r *Report) writeDeployed(w io.Writer, row func(name, value string)) {
	// figures writes a row per figure of fs: label, relays, mode, value.
	figures := func(label string, fs []RelayFigure, value func(RelayFigure) string) {
		for _, f := range fs {
			mode := "unordered"
			if f.Ordered {
				mode = "ordered"
			}
			row(fmt.Sprintf("%s, %d, %s", label, f.Relays, mode), value(f))
		}
	}
	rate := func(f RelayFigure) string { return fmt.Sprintf("%.0f ev/s", f.Rate) }
	cpu := func(f RelayFigure) string { return f.CPU.split() }
	stmts := func(f RelayFigure) string { return f.Statements.detail() }
	if len(r.RelayProcess) > 0 || len(r.Plain) > 0 {
		fmt.Fprintln(w, "\ndrain as deployed: ferry relay --drain processes (defaults) and the plain relay")
		figures("ferry relay processes", r.RelayProcess, rate)
		figures("plain relay loops", r.Plain, rate)
	}
	if len(r.Relay)+len(r.RelayProcess)+len(r.Plain) > 0 {
		fmt.Fprintln(w, "\nCPU per event, µs: database / broker / relay (n/a: not local, or inside the bench)")
		figures("ferry in-process", r.Relay, cpu)
		figures("ferry relay processes", r.RelayProcess, cpu)
		figures("plain relay", r.Plain, cpu)
		fmt.Fprintln(w, "\nstatements per event, counted by the database server (MySQL: Questions; PostgreSQL: scans of the"+
			" outbox's tables); then the rows they read per event (MySQL: Innodb_rows_read, MariaDB: Rows_read; PostgreSQL: rows fetched through indexes)")
		figures("ferry in-process", r.Relay, stmts)
		figures("ferry relay processes", r.RelayProcess, stmts)
		figures("plain relay", r.Plain, stmts)
	}
	var lives []*LiveResult
	for _, l := range []*LiveResult{r.Live, r.LiveProcess, r.LivePlain} {
		if l != nil {
			lives = append(lives, l)
		}
	}
	if len(lives) > 0 {
		fmt.Fprintln(w, "\nlive: one event per transaction at a fixed rate, commit → delivery at a consumer")
		for _, l := range lives {
			name := map[string]string{LiveInProcess: "ferry in-process, woken by the commits",
				LiveProcess: "ferry relay process, defaults", LivePlain: "plain relay polling every 10ms"}[l.Mode]
			row(fmt.Sprintf("%s: rate; p50 / p99 / max", name),
				fmt.Sprintf("%.0f ev/s; %s / %s / %s", l.Rate, ms(l.P50), ms(l.P99), ms(l.Max)))
		}
		if l := r.Live; l != nil {
			row("in-process: claims (events per claim); relay errors", fmt.Sprintf("%d (%.1f); %d", l.Claims, float64(l.Events)/float64(max(l.Claims, 1)), l.RelayErrors))
			row("in-process: mean claim / mean publish with confirms", ms(l.ClaimTook)+" / "+ms(l.PublishTook))
		}
	}
	for _, s := range r.Skipped {
		fmt.Fprintf(w, "\nskipped: %s\n", s)
	}
}

// writeTargets writes the targets table.
func (r *Report) writeTargets(w io.Writer) {
	if len(r.Targets) == 0 {
		return
	}
	fmt.Fprintln(w, "\ntargets for the relay as deployed")
	for _, x := range r.Targets {
		cmp := "≥"
		if x.AtMost {
			cmp = "≤"
		}
		v := "n/a"
		if x.Met != nil {
			verdict := "met"
			if !*x.Met {
				verdict = "MISSED"
			}
			v = fmt.Sprintf("%.2f  (target %s %.2f: %s)", x.Value, cmp, x.Target, verdict)
		}
		if x.Note != "" {
			v += "  [" + x.Note + "]"
		}
		fmt.Fprintf(w, "  %-72s %s\n", x.Name, v)
	}
}

// split formats the CPU per event as "157 / 80 / 45".
func (c CPU) split() string {
	f := func(v *float64) string {
		if v == nil {
			return "n/a"
		}
		return fmt.Sprintf("%.0f", *v)
	}
	return f(c.DB) + " / " + f(c.Broker) + " / " + f(c.Relay)
}
