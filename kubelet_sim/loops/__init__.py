"""Threads, loops and time: the supervisor, the timers, the work queue, backoff, the clock."""
