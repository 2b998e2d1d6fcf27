"""The readiness wing: whether a unit answers, and who is routed to it.

``probe`` asks every unit its readiness question in parallel each pass (one function per
``Unit.probe`` kind); ``canary`` sends a frontend's one-token completion on threads of its own and
keeps the last answer per life; ``health`` follows a unit across passes (Ready since, failures,
fatal log lines); ``router_sync`` keeps a router's worker set to the workers that serve.
"""
