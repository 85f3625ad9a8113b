"""One file per role, for a source checkout: `python -m workers.ingest` is
`python -m streamlearn.ingest.worker` (the process itself: config, connections, signals,
wiring). The wheel installs only `streamlearn`, so it claims no generic top-level name."""
