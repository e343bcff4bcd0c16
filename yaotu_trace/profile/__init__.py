"""What the workload looks like: the profile of `trace analyze` and the data behind pictures."""
