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
// docs/operations.md. With promtool on the PATH they also run promtool's
// checks.
//
// They also check the documentation: every relative link of README.md,
// CHANGELOG.md and docs/ leads to a file and a heading that exist, and
// every Go code block in them is quoted from a Go file that the test suite
// builds.
package deploy
