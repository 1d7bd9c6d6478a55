# Project Orion - sprint constants
SPRINT_NUMBER = 9
SPRINT_START = "2026-04-13"
SPRINT_END = "2026-04-17"
MAX_TASKS_PER_SPRINT = 40
API_BASE_URL = "https://api.oriontech.io/v2"
