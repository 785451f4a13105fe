"""What a run records while its workload runs: tcp_info, queues, pcaps, on one clock."""
