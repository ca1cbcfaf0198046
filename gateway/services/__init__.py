"""The services: what a connection does, independent of the transport that carries it.

The chat service (plans and runs a turn), live sessions, the registry of connections and runs,
the stream logs and their stores (memory, Redis), leases across instances, and identity. They
use the core and the agents' host; transports call them, and the app wires them together.
"""
