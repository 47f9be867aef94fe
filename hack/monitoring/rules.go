package main

import (
	"fmt"

	"sigs.k8s.io/yaml"
)

// runbookBase is where the alerts' runbooks live: one anchor per alert in
// docs/troubleshooting.md.
const runbookBase = "https://github.com/flotilla-dev/flotilla/blob/main/docs/troubleshooting.md#"

// Rule is one alerting rule as Prometheus reads it.
type Rule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

// RuleGroup is a group of rules.
type RuleGroup struct {
	Name  string `json:"name"`
	Rules []Rule `json:"rules"`
}

// RuleFile is a Prometheus rule file, and a PrometheusRule's spec.
type RuleFile struct {
	Groups []RuleGroup `json:"groups"`
}

// alert builds a rule; anchor names its runbook section.
func alert(name, severity, expr, forDur, summary, description, anchor string) Rule {
	return Rule{
		Alert: name, Expr: expr, For: forDur,
		Labels: map[string]string{"severity": severity},
		Annotations: map[string]string{
			"summary":     summary,
			"description": description,
			"runbook_url": runbookBase + anchor,
		},
	}
}

// Rules are Flotilla's alerts. Every expression uses only metrics of
// docs/metrics.md (a test checks), and deploy/monitoring/tests has a
// promtool test of each, firing and not firing.
func Rules() RuleFile {
	return RuleFile{Groups: []RuleGroup{
		{Name: "flotilla-members", Rules: []Rule{
			alert("FlotillaMemberUnreachable", "critical",
				`flotilla_member_heartbeat_age_seconds > 60`, "2m",
				"Member cluster {{ $labels.cluster }} has not been heard from for {{ $value | humanizeDuration }}.",
				"The hub has had no heartbeat from the agent of member {{ $labels.cluster }} (or, for a Push member, no answer from its apiserver) for more than a minute. The member turns Ready=False after the heartbeat grace and its replicas move to other clusters once it is tainted unreachable; nothing new reaches it until it is back.",
				"member-unreachable"),
			alert("FlotillaPruneBlocked", "warning",
				`flotilla_prune_blocked == 1`, "5m",
				"The deletion brake holds a prune on member {{ $labels.cluster }}.",
				"The agent of member {{ $labels.cluster }} would delete more of what it applied than its deletion brake allows after a snapshot, and deletes nothing until an admin confirms with the flotilla.dev/confirm-prune annotation on the MemberCluster (kubectl describe membercluster {{ $labels.cluster }} says how many objects and which Works).",
				"prune-blocked"),
			alert("FlotillaAgentStreamDown", "critical",
				`flotilla_agent_stream_up == 0 and flotilla_agent_leader == 1`, "5m",
				"The leading agent at {{ $labels.instance }} holds no sync stream to the hub.",
				"The agent replica that holds the leader Lease has had no accepted sync stream to the hub for five minutes: it keeps what it applied running but receives no change and reports no status. Its log says why the stream ends (hub unreachable, certificate refused, fleet mismatch).",
				"agent-stream-down"),
		}},
		{Name: "flotilla-rollouts", Rules: []Rule{
			alert("FlotillaRolloutStuck", "warning",
				`flotilla_rollout_active == 1 and (time() - flotilla_rollout_last_progress_timestamp_seconds) > 1800`, "5m",
				"The rollout of MyApp {{ $labels.namespace }}/{{ $labels.name }} has not moved for over 30 minutes.",
				"The Progressive rollout of MyApp {{ $labels.namespace }}/{{ $labels.name }} is Progressing but no cluster finished and no wave started for more than 30 minutes: a cluster's Deployment does not become available (image, quota, scheduling), or its member does not report.",
				"rollout-stuck"),
			alert("FlotillaRolloutPausedOnFailure", "warning",
				`flotilla_rollout_paused == 1`, "1m",
				"The rollout of MyApp {{ $labels.namespace }}/{{ $labels.name }} stopped after failures.",
				"More clusters failed the rollout of MyApp {{ $labels.namespace }}/{{ $labels.name }} than maxFailures allows, and onFailure is Pause: clusters not yet updated stay on the last good revision until a new revision is applied. status.rollout says which clusters failed and why.",
				"rollout-paused"),
		}},
		{Name: "flotilla-certificates", Rules: []Rule{
			alert("FlotillaAgentCertificateExpiringSoon", "critical",
				`(flotilla_agent_certificate_expiry_timestamp_seconds - time()) < 7 * 86400 and flotilla_agent_certificate_expiry_timestamp_seconds > 0`, "15m",
				"The agent certificate at {{ $labels.instance }} expires in {{ $value | humanizeDuration }}.",
				"The agent's client certificate expires in less than 7 days and has not been renewed (renewal starts well before; flotilla_agent_certificate_renewals_total says how it went). When it expires the hub refuses the agent's stream.",
				"certificate-expiring"),
			alert("FlotillaHubCertificateExpiringSoon", "critical",
				`(flotilla_hub_certificate_expiry_timestamp_seconds - time()) < 7 * 86400`, "15m",
				"The hub's {{ $labels.certificate }} certificate at {{ $labels.instance }} expires in less than 7 days.",
				"The hub's {{ $labels.certificate }} certificate expires in less than 7 days. A self-managed hub renews its serving certificate at 80 % of its lifetime, so this means renewal fails, or the certificates are provided and must be replaced; agents and the API server's webhook calls fail once it expires.",
				"certificate-expiring"),
		}},
		{Name: "flotilla-hub", Rules: []Rule{
			alert("FlotillaHubNoLeader", "critical",
				`(max(flotilla_hub_leader) or vector(0)) < 1`, "1m",
				"No Flotilla hub replica leads.",
				"No hub replica has held the leader Lease for over a minute (or no hub is scraped at all): nothing schedules MyApps, writes Works or serves agents. Existing workloads keep running on the members.",
				"hub-no-leader"),
			alert("FlotillaMyAppStatusWriteErrors", "warning",
				`sum by (job) (rate(flotilla_myapp_status_writes_total{result="error"}[5m])) > 0`, "10m",
				"The hub fails to write MyApp status.",
				"MyApp status patches have failed for 10 minutes (the hub's log says why: apiserver errors, admission, RBAC); kubectl get myapps shows stale status meanwhile.",
				"status-write-errors"),
			alert("FlotillaWorkStatusWriteErrors", "warning",
				`sum by (job) (rate(flotilla_work_status_writes_total{result=~"error|rejected"}[5m])) > 0`, "10m",
				"The hub fails to write Work status from agent reports.",
				"Work status patches from the agents' reports have failed or been rejected for 10 minutes: MyApp readiness and rollouts do not see what the members report.",
				"status-write-errors"),
		}},
	}}
}

// PrometheusRule is Rules as a prometheus-operator PrometheusRule.
func PrometheusRule(rf RuleFile) map[string]any {
	return map[string]any{
		"apiVersion": "monitoring.coreos.com/v1",
		"kind":       "PrometheusRule",
		"metadata": map[string]any{
			"name":      "flotilla",
			"namespace": "flotilla-system",
			"labels": map[string]string{
				"app.kubernetes.io/name":    "flotilla",
				"app.kubernetes.io/part-of": "flotilla",
			},
		},
		"spec": rf,
	}
}

const generatedHeader = "# Generated by hack/monitoring (make manifests); do not edit.\n"

// ruleFiles are the plain rule file and the PrometheusRule, by path.
func ruleFiles() (map[string][]byte, error) {
	rf := Rules()
	plain, err := yaml.Marshal(rf)
	if err != nil {
		return nil, fmt.Errorf("encoding the rule file: %w", err)
	}
	cr, err := yaml.Marshal(PrometheusRule(rf))
	if err != nil {
		return nil, fmt.Errorf("encoding the PrometheusRule: %w", err)
	}
	return map[string][]byte{
		"flotilla-rules.yaml":          append([]byte(generatedHeader+"# The Prometheus rule file of Flotilla's alerts; flotilla-prometheusrule.yaml holds the same rules for the Prometheus operator.\n"), plain...),
		"flotilla-prometheusrule.yaml": append([]byte(generatedHeader+"# Flotilla's alerts for the Prometheus operator; flotilla-rules.yaml holds the same rules as a plain rule file.\n"), cr...),
	}, nil
}
