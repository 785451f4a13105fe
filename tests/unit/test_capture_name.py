"""Each WAN direction's capture has a file of its own: the paths of a multipath link each have
a wire, and a capture named by the clusters alone made path 1's capture overwrite path 0's (the
bulk flow hashed onto the other path was missing from flows.parquet)."""

from testbed.trace.run_traces import capture_name


def test_every_direction_and_path_has_its_own_capture_file() -> None:
    names = [capture_name(d) for d in ("east->west", "west->east", "east->west/0", "east->west/1")]
    assert names == ["east-west.pcap", "west-east.pcap", "east-west-0.pcap", "east-west-1.pcap"]
