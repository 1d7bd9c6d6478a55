"""Synchronous log handler for Project Orion API.

Every call writes its line to the log file immediately, on the calling
thread, so a slow disk blocks the request that is logging.
"""

import os
from datetime import datetime


class SyncLogHandler:
    def __init__(self, log_file):
        """Create a handler writing to log_file, creating its directory."""
        self.log_file = log_file
        log_dir = os.path.dirname(log_file)
        if log_dir:
            os.makedirs(log_dir, exist_ok=True)

    def write_log(self, level, message):
        """Append one line, "[<ISO timestamp>] <LEVEL>: <message>".

        The file is opened, written and closed on every call (blocking).
        """
        timestamp = datetime.now().isoformat()
        line = f"[{timestamp}] {level.upper()}: {message}\n"
        with open(self.log_file, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()

    def info(self, message):
        """Log a message at INFO level."""
        self.write_log("INFO", message)

    def warning(self, message):
        """Log a message at WARNING level."""
        self.write_log("WARNING", message)

    def error(self, message):
        """Log a message at ERROR level."""
        self.write_log("ERROR", message)
