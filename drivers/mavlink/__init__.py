"""The MAVLink driver (ArduPilot, PX4): the codec, the network ports, its config table and the driver."""
