"""`python -m workers.actor` from a source checkout: `streamlearn.actor.worker`."""

from streamlearn.actor.worker import main

if __name__ == "__main__":
    raise SystemExit(main())
