"""Task-queue and workflow naming in one place."""

DEFAULT_TASK_QUEUE = "wds-pipelines"
