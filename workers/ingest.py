"""`python -m workers.ingest` from a source checkout: `streamlearn.ingest.worker`."""

from streamlearn.ingest.worker import main

if __name__ == "__main__":
    raise SystemExit(main())
