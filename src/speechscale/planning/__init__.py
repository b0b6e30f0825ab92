"""Time-to-train and cost planning for data-parallel ASR training (`speechscale plan`); see docs/planner.md."""
