"""Stand-in for peft (workaround (b) of docs reference §16.1).

skyrl 0.3.0 uses peft only to write adapter_config.json next to a saved LoRA
(skyrl/tx/utils/models.py: peft.LoraConfig(...).save_pretrained(dir)). This
writes the same kind of file: the arguments plus the fields peft adds.
"""

import json
import os

__version__ = "0.0.0"


class LoraConfig:
    def __init__(self, **kwargs):
        self._fields = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "bias": "none", "lora_dropout": 0.0}
        self._fields.update(kwargs)
        for key, value in self._fields.items():
            setattr(self, key, value)

    def to_dict(self):
        return dict(self._fields)

    def save_pretrained(self, save_directory, **_kwargs):
        os.makedirs(save_directory, exist_ok=True)
        with open(os.path.join(save_directory, "adapter_config.json"), "w") as f:
            json.dump(self._fields, f, indent=2, sort_keys=True, default=str)
