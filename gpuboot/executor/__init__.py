"""Running Ansible work on an execution node through ansible-runner's streaming protocol.

The controller transmits a job (``ansible-runner transmit``'s stream) to a supervisor on
the executor (``supervisor``: ``ansible-runner worker`` in a process group of its own,
its stream spooled to disk) and reads the worker's stream back itself (``wire``), journals
each event as it arrives (``journal``) and judges the shard (``outcome``): complete only
when the worker's final status, its end of stream and its rc have all arrived; otherwise
``lost``, and every host the shard did not finish ``unknown``.
"""
