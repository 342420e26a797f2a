"""Tests of deploy/ and dashboards/: the deploy files, the Grafana dashboards, the Prometheus alert rules."""
