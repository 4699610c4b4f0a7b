"""Running the gateway as a server: worker processes, overload control, the event loop's lag."""
