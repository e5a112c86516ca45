"""The typed configuration (split into one module per section in the next commit)."""

from serving.config.loading import *  # noqa: F403
