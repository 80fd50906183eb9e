"""Pure rules of tool confinement: where a session's workspace lives, what environment and limits a
sandboxed command gets, and the bubblewrap command line that enforces them (I/O in ``agentbus_redis.sandbox``)."""
