import json
import os

DEFAULT_CONFIG = {
    "host": "localhost",
    "port": 8080,
    "debug": False,
    "log_level": "INFO",
    "timeout": 30,
}


def load_config(path):
    config = {}
    for key in DEFAULT_CONFIG:
        config[key] = DEFAULT_CONFIG[key]
    if not os.path.exists(path):
        return config
    f = open(path)
    data = json.load(f)
    f.close()
    for key in data:
        config[key] = data[key]
    return config


def get_config_value(config, key, default=None):
    if key in config:
        return config[key]
    else:
        return default


def validate_config(config):
    if "host" not in config:
        return False
    if "port" not in config:
        return False
    if type(config["port"]) != int:
        return False
    return True
