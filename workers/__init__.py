"""Process entry points: load config, build the role's objects, run its loop, handle signals."""
