"""`python -m workers.learner` from a source checkout: `streamlearn.learner.worker`."""

from streamlearn.learner.worker import main

if __name__ == "__main__":
    raise SystemExit(main())
