"""Run reports: `speechscale report RUN_DIR` turns a run's folder into one HTML page with PNG plots."""
