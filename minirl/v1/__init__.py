"""verl 0.9.1's v1 trainer (`trainer.use_v1=true`): agent loops (`agent_loop.py`) feed a replay buffer
(`replay_buffer.py`); the trainer (`trainer.py`) takes whole prompt groups from it and trains them with the legacy
trainer's step. `minirl.trainer.train` picks it when the config says `trainer.use_v1=true`."""
