// Package deploy holds no code: its directory holds what operators load
// next to ferry, and its tests check it against the code.
//
//	prometheus/ferry-alerts.yml       Prometheus alert rules (promtool check rules)
//	prometheus/ferry-alerts.test.yml  their unit tests (promtool test rules)
//	grafana/ferry-dashboard.json      a Grafana dashboard of every ferry metric
//	kubernetes/*.yaml                 plain manifests of the relay and the console
//	helm/ferry                        the Helm chart of both, and ferry migrate as a hook Job
//
// The tests need no service and no promtool: every ferry_* metric the
// rules and the dashboard query must be one that package ferryprom
// exports, every alert must carry a severity, a summary, a description and
// a runbook_url, and every runbook_url must point at a heading of
// docs/operations.md. With promtool on the PATH they also run promtool's
// checks.
//
// With helm (scripts/helm.sh installs it in .bin) they render the chart
// and check what it renders: probes, security contexts, the migrate hook,
// no secret in a ConfigMap, every value documented, the plain manifests in
// step with it, and every rendered command accepted by ferry.
//
// They also check the documentation: every relative link of README.md,
// CHANGELOG.md and docs/ leads to a file and a heading that exist, and
// every Go code block in them is quoted from a Go file that the test suite
// builds.
package deploy
