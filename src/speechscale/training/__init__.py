"""Training: the loop, checkpoints, optimizers and schedules."""
