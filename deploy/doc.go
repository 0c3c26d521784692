// Package deploy holds no code: its directory holds what operators load
// next to ferry, and its tests check it against the code.
//
//	prometheus/ferry-alerts.yml       Prometheus alert rules (promtool check rules)
//	prometheus/ferry-alerts.test.yml  their unit tests (promtool test rules)
//	grafana/ferry-dashboard.json      a Grafana dashboard of every ferry metric
//
// The tests need no service and no promtool: every ferry_* metric the
// rules and the dashboard query must be one that package ferryprom
// exports, every alert must carry a severity, a summary, a description and
// a runbook_url, and every runbook_url must point at a heading of
// README.md. With promtool on the PATH they also run promtool's checks.
package deploy
