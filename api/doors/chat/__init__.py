"""Agent chat: the webhook's conversation engine, its tools, history and channels."""
