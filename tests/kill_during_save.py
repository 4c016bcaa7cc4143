"""``python kill_during_save.py STEP ARGV...``: run ``hf-plm-ext ARGV`` and SIGKILL the process inside the Trainer's
save of ``checkpoint-STEP``, after its weights and optimizer are written and before its ``trainer_state.json``: a
checkpoint cut as a kill cuts it."""

import os
import signal
import sys

from transformers import Trainer

KILL_AT_STEP = int(sys.argv[1])
save_rng_state = Trainer._save_rng_state


def killed_while_saving(self, output_dir):
    if self.state.global_step == KILL_AT_STEP:
        os.kill(os.getpid(), signal.SIGKILL)
    return save_rng_state(self, output_dir)


Trainer._save_rng_state = killed_while_saving

from hf_plm_ext_cli.main import main  # noqa: E402

main(sys.argv[2:])
