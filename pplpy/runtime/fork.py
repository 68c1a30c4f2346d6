"""After ``os.fork()`` the child has only the thread that forked.

A lock another thread held at that moment (a ``Runtime`` in the middle of ``run()``, an
``InferenceSession`` whose runtime was checked out, a control-flow body being built for a new
shape) stays held in the child for ever, and the child's first run waits on it for ever.  The
C thread pool restarts its workers in a child by itself (``pplpy_pool.h``); the Python
objects holding such state register here, and get ``_after_fork_in_child()`` called in every
child, where no other thread can be using them; a module's own lock registers a function.
"""

import os
import threading
import weakref

_REGISTERED = weakref.WeakSet()
_FUNCTIONS = []


def reset_after_fork(obj):
    """Call ``obj._after_fork_in_child()`` in each forked child while ``obj`` lives."""
    _REGISTERED.add(obj)


def new_lock_after_fork(module, name):
    """Give ``module.name`` (a module-level lock) a new lock in each forked child."""
    _FUNCTIONS.append(lambda: setattr(module, name, threading.Lock()))


def _after_fork_in_child():
    for function in _FUNCTIONS:
        function()
    for obj in list(_REGISTERED):
        obj._after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
