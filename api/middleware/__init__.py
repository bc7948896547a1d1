"""Pure ASGI middleware: body limits, text guard, idempotency, metrics, limits and usage."""
