"""The process itself: what a command-line tool that others pipe and signal must get right.

- :mod:`.signals`: SIGINT, SIGTERM and SIGHUP through start-up, training and after;
- :mod:`.streams`: the standard streams and the exit (output that survives a closed pipe, the
  console's logging, messages clipped to one line, the fast exit);
- :mod:`.gc_pause`: Python's cyclic garbage collector held off while a run starts;
- :mod:`.system`: facts about the machine and the code (memory available, versions, git
  commits).

A layer beside :mod:`rltrain.config`, over :mod:`rltrain.common`: the standard library (and,
for versions, torch and gymnasium); of rltrain, its version only. Its modules import none of
each other."""
