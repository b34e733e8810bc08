"""Postprocessors: the checks and rewrites every sampled trace goes through before it becomes a
candidate (parallel, vectorize and unroll annotations made real, tensorized blocks rewritten,
programs a target cannot run refused), for CPUs and GPUs, and the list a hardware gets.
"""
