"""One logging configuration for the server and its worker processes."""

from __future__ import annotations

import logging
import logging.config

LEVELS = ("critical", "error", "warning", "info", "debug")


def configure_logging(level: str = "info", *, process_name: str = "main") -> None:
    """Human-readable lines on stderr, each naming its process."""
    logging.config.dictConfig(
        {
            "version": 1,
            "disable_existing_loggers": False,
            "formatters": {
                "text": {
                    "format": f"%(asctime)s %(levelname)s [{process_name}] %(name)s: %(message)s",
                },
            },
            "handlers": {
                "stderr": {"class": "logging.StreamHandler", "formatter": "text"},
            },
            "root": {"handlers": ["stderr"], "level": level.upper()},
        }
    )
