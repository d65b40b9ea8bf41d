"""benchmarks/sanitizer_output.py on reports written as compute-sanitizer prints them (its documentation's
formats: findings and summaries after ``=========``), with the begin and end lines of the runs."""

import sanitizer_output
from sanitizer_output import parse, verdict

MEMCHECK_CLEAN = """\
========= COMPUTE-SANITIZER
lamina-sanitize: begin contraction-1
lamina-sanitize: end contraction-1 ok seconds=1.20 error=3.10e-08 tolerance=1e-04
lamina-sanitize: begin pointwise-1
lamina-sanitize: end pointwise-1 ok seconds=0.31 error=0.00e+00 tolerance=1e-04
========= ERROR SUMMARY: 0 errors
"""

MEMCHECK_OUT_OF_BOUNDS = """\
========= COMPUTE-SANITIZER
lamina-sanitize: begin pointwise-2
========= Invalid __global__ read of size 16 bytes
=========     at add+0x2f0
=========     by thread (31,0,0) in block (0,0,0)
=========     Address 0x7f3a1e000400 is out of bounds
=========     and is 1 bytes after the nearest allocation at 0x7f3a1e000000 of size 1024 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: [0x2f3a4b] in libcuda.so.1
=========
========= Program hit CUDA_ERROR_LAUNCH_FAILED (error 719) due to "unspecified launch failure" on CUDA API call to cuStreamSynchronize.
=========     Saved host backtrace up to driver entry point at error
lamina-sanitize: end pointwise-2 failed seconds=0.80 RuntimeError: CUDA error: unspecified launch failure
========= Target application returned an error
========= ERROR SUMMARY: 2 errors
"""

RACECHECK_RACE = """\
========= COMPUTE-SANITIZER
lamina-sanitize: begin contraction-9
========= Error: Race reported between Write access at relu+0x5a0
=========     and Read access at relu+0x6c0 [128 hazards]
=========
lamina-sanitize: end contraction-9 ok seconds=3.02 error=2.00e-08 tolerance=1e-04
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""

RACECHECK_WARNING = """\
========= COMPUTE-SANITIZER
lamina-sanitize: begin row_reduction-4
========= Warning: (Warp Level Programming) Potential RAW hazard detected at __shared__ 0x80 in block (0,0,0) :
=========     Write Thread (0,0,0) at 0x00000310 in /tmp/softmax.cu:41:softmax(float const*, float*)
=========     Read Thread (1,0,0) at 0x00000348 in /tmp/softmax.cu:44:softmax(float const*, float*)
=========     Current Value : 0
lamina-sanitize: end row_reduction-4 ok seconds=0.40 error=1.00e-07 tolerance=1e-04
========= RACECHECK SUMMARY: 1 hazard displayed (0 errors, 1 warning)
"""

RACECHECK_CLEAN = """\
========= COMPUTE-SANITIZER
lamina-sanitize: begin matmul_row_reduction-2
lamina-sanitize: end matmul_row_reduction-2 ok seconds=9.70 error=4.00e-08 tolerance=1e-04
========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)
"""

HUNG = """\
========= COMPUTE-SANITIZER
lamina-sanitize: begin contraction-1
lamina-sanitize: end contraction-1 ok seconds=1.20 error=3.10e-08 tolerance=1e-04
lamina-sanitize: begin matmul_row_reduction-3
"""

WRONG_NUMBERS = """\
========= COMPUTE-SANITIZER
lamina-sanitize: begin unrolled_reduction-1
lamina-sanitize: end unrolled_reduction-1 mismatch seconds=0.50 error=3.00e-01 tolerance=1e-02
========= ERROR SUMMARY: 0 errors
"""

TOOL_DID_NOT_START = """\
========= Error: Unrecognized option '--racecheck-report'
"""


def test_a_clean_memcheck_run():
    output = parse(MEMCHECK_CLEAN)
    assert (output.errors, output.hazards, output.findings) == (0, None, ())
    assert output.begun == ("contraction-1", "pointwise-1") and not output.unfinished()
    assert output.ended["pointwise-1"][0] == "ok" and "seconds=0.31" in output.ended["pointwise-1"][1]
    assert output.clean and verdict(output, 0, "contraction-1") == "clean"


def test_an_out_of_bounds_read_is_counted_and_names_its_kernel():
    output = parse(MEMCHECK_OUT_OF_BOUNDS)
    assert output.errors == 2 and not output.clean
    assert output.findings[0] == "Invalid __global__ read of size 16 bytes"
    assert "Address 0x7f3a1e000400 is out of bounds" in output.findings
    assert output.kernels == ("add",)
    assert output.ended["pointwise-2"][0] == "failed"
    assert verdict(output, 86, "pointwise-2") == "errors"


def test_a_race_is_an_error_with_its_hazards():
    output = parse(RACECHECK_RACE)
    assert (output.hazards, output.errors, output.warnings) == (1, 1, 0)
    assert output.kernels == ("relu",)
    assert "[128 hazards]" in output.findings[1]
    assert verdict(output, 86, "contraction-9") == "errors"


def test_a_racecheck_warning_is_a_hazard_not_an_error():
    output = parse(RACECHECK_WARNING)
    assert (output.hazards, output.errors, output.warnings) == (1, 0, 1)
    assert output.kernels == ("softmax",)
    assert verdict(output, 0, "row_reduction-4") == "hazards"


def test_a_clean_racecheck_run():
    output = parse(RACECHECK_CLEAN)
    assert (output.hazards, output.errors, output.warnings) == (0, 0, 0)
    assert verdict(output, 0, "matmul_row_reduction-2") == "clean"


def test_a_hang_leaves_the_representative_it_stopped_in_unfinished():
    output = parse(HUNG)
    assert output.unfinished() == ["matmul_row_reduction-3"] and not output.has_summary
    assert verdict(output, None, "matmul_row_reduction-3") == "timeout"


def test_wrong_numbers_under_a_silent_tool_are_a_mismatch():
    assert verdict(parse(WRONG_NUMBERS), 1, "unrolled_reduction-1") == "mismatch"
    moved = WRONG_NUMBERS.replace("mismatch seconds", "setting-changed seconds")
    assert verdict(parse(moved), 1, "unrolled_reduction-1") == "setting-changed"


def test_a_tool_that_printed_no_summary_is_not_clean():
    output = parse(TOOL_DID_NOT_START)
    assert not output.has_summary and not output.clean
    assert verdict(output, 1, "contraction-1") == "failed"
    ran_but_no_summary = parse(MEMCHECK_CLEAN.replace("========= ERROR SUMMARY: 0 errors\n", ""))
    assert verdict(ran_but_no_summary, 0, "contraction-1") == "no-summary"


def test_findings_are_cut_to_the_first_lines():
    many = "".join(f"========= Invalid __shared__ write of size 4 bytes\n=========     at k+0x{i:x}\n"
                   for i in range(100)) + "========= ERROR SUMMARY: 100 errors\n"
    output = parse(many)
    assert output.errors == 100 and len(output.findings) == sanitizer_output.FIRST_LINES


def test_each_finding_belongs_to_the_representative_it_was_printed_in():
    two = MEMCHECK_OUT_OF_BOUNDS.replace("========= ERROR SUMMARY: 2 errors\n", "") + MEMCHECK_CLEAN.replace(
        "========= COMPUTE-SANITIZER\n", "")
    output = parse(two)
    faulty = output.findings_of("pointwise-2")
    assert faulty[0] == "Invalid __global__ read of size 16 bytes" and faulty[1] == "  at add+0x2f0"
    assert sanitizer_output.kernels_named(faulty) == ("add",)
    assert output.findings_of("contraction-1") == () and output.outside == ()
    assert verdict(output, 86, "pointwise-2") == "errors" and verdict(output, 86, "contraction-1") == "clean"


def test_a_finding_outside_any_representative_is_kept_apart():
    output = parse("========= COMPUTE-SANITIZER\n========= Invalid __global__ write of size 4 bytes\n"
                   + MEMCHECK_CLEAN.replace("========= COMPUTE-SANITIZER\n", ""))
    assert output.outside == ("Invalid __global__ write of size 4 bytes",)
    assert verdict(output, 86, "contraction-1") == "clean"
