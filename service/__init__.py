"""What every service process (the API, the worker) is built from: settings, tracing and
the outbox relay. Entry points (``wds/``, ``worker.py``) sit above it; it imports
activities and storage only."""
