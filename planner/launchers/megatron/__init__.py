"""Megatron-LM (megatron-core 0.19.2): what planner writes for it, reads back from it, and which
of its start-up checks a plan or a command line breaks."""
