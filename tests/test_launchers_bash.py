"""The bounded bash reader (planner.launchers.bash): what it reads agrees with bash itself, unknown
values are named and never run, and no input makes it hang, blow up or crash."""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest

from planner.errors import PlannerError
from planner.launchers.bash import MAX_LOOP, ScriptStop, run_script

BASH = shutil.which("bash")

# Each snippet ends in `cmd ...` lines; bash runs it with cmd printing its arguments, the reader
# records them. Every construct the launch scripts use is here; none needs a file or a command's output.
ORACLE = {
    "quoting": r"""cmd 'a b' "c d" e\ f $'g\th' "x\"y" 'it'\''s' "$" a#b # comment
cmd one \
    two""",
    "defaults": r"""N=${NNODES:-"1"}; M=${X:-"a b"}; P=${Y-'q r'}; cmd $N "$M" $M $P
E=; cmd "${E:-empty}" "${E-set}" ${E:+alt} "${N:+alt}"
cmd ${Z:=zed} $Z; cmd ${#Z} "${#M}"
""",
    "arrays": r"""A=("--fp8-format hybrid" "--x y")
A+=(z)
cmd ${A[@]}
cmd "${A[@]}"
cmd "${A[*]}" ${#A[@]} "${A[1]}" "${A[@]:1:2}" "${A[-1]}"
B=(); cmd "${B[@]}" end
C=(x "" y); cmd ${C[@]}; cmd "${C[@]}"
D[3]=d; cmd "${#D[@]}" "${D[3]}"
""",
    "ifs": r"""X="a,,b"; IFS=,; cmd $X; IFS=" ,"; Y=" a , b ,"; cmd $Y; unset IFS; Z=$'p\tq  r'; cmd $Z
""",
    "patterns": r"""P=/a/b/c.tar.gz
cmd ${P##*/} ${P#*/} ${P%.*} ${P%%.*} ${P//\//_} ${P/#\/a/X} ${P/%gz/bz} ${P/b/B}
cmd ${P^^} ${P:2:3} ${P: -3} ${P:4} "${P//[ab]/}"
S=Hello; cmd ${S,,} ${S^} ${S//l/L}
""",
    "export and prefixes": r"""export A=1 B
B=2
C=3 cmd "$A" "$B" "$C"
""",
    "conditions": r"""X=fp8
if [[ "$X" == "fp8" ]]; then cmd fp8; elif [ "$X" = bf16 ]; then cmd bf16; else cmd other; fi
if [ -z "$UNSET_VAR" ] && [ -n "$X" ]; then cmd z-n; fi
[[ $X == f* && ! $X == *x ]] && cmd glob
[ 3 -lt 10 ] || cmd never
[ "abc" \< "abd" ] && cmd less
[[ -n $X || $(false) ]] && cmd short
test 2 -eq 2 -a x = x && cmd and
case "$X" in bf16|fp16) cmd half;; fp*) cmd eight;; *) cmd none;; esac
""",
    "loops": r"""for i in 0 1 2 3 4 5; do
  if [ $i -lt 2 ]; then F+="0,"; else F+="1,"; fi
  [ $i -eq 4 ] && break
done
cmd "$F"
for ((i=0; i<4; i++)); do L+=($((i*i))); done
cmd "${L[@]}"
n=0; while [ $n -lt 3 ]; do n=$((n+1)); done; cmd $n
until [ $n -eq 0 ]; do n=$((n-1)); continue; done; cmd $n
set -- p q r; for a; do cmd "$a"; done; shift; cmd $# "$@"
""",
    "printf -v": r"""printf -v FREQ "[%s]" "0,0,1,1"
printf -v N "%03d|%-4s|%x|%X|%o|%5.2f|%%|%c" 7 ab 255 -1 8 3.14159 xyz
printf -v R "%s-" a b c
printf -v T 'end\'
cmd "$FREQ" "$N" "$R" "$T"
""",
    "arithmetic": r"""cmd $((9**9**9)) $((2**63)) $((1<<64)) $((1<<65)) $((1<<-1)) $((-7/2)) $((-7%2))
cmd $(( (-9223372036854775807-1) / -1 )) $(( (-9223372036854775807-1) % -1 )) $((9223372036854775808))
cmd $((0x1F)) $((010)) $((2#101)) $((36#z)) $((64#_)) $((-2**2)) $((2**3**2))
x=5; cmd $((x+=2)) $x $((x++)) $x $((++x)) $(( x > 7 ? 100 : 200 )) $((x<<2|1)) $((!x)) $((~x))
cmd $(( 0 && (y=1) )) "${y-unset}" $(( 1 || (z=9) )) "${z-unset}" $((a=b=3, a+b))
v="2+3"; cmd $((v*2)) $(( (v)*2 )) $((GPUS*NODES))
""",
    "functions": r"""f() { local a=$1; b=$2; cmd "$a" "$#"; return 3; }
a=outer; f x y; cmd $? "$a" "$b"
g() { cmd "$@"; }; g "1 2" 3
""",
    "eval and bash -c": r"""ARGS="--a 1 --b '2 3'"
eval "cmd $ARGS"
run_cmd="cmd x
  y z"
eval ${run_cmd}
""",
    "braces": r"""for i in {0..3}; do F+=$i; done; cmd "$F" {a,b}{1,2} x{01..10..3}y {c..a} {1..-2}
cmd run{1,2,{x,y}}.log "{a,b}" {single} {1..3}$F a{,b} ${F:-{1,2}}
""",
    "builtin-only command substitutions": r"""FREQ=(0 0 1 1)
cmd --moe-layer-freq "[$(IFS=', '; echo "${FREQ[*]}")]" $(printf '%s,' "${FREQ[@]}") $(echo a   b) "$(echo -n x)"
X=$(IFS=:; printf '%s\n' "${FREQ[*]}"; echo; echo "tail"); cmd "$X" ${FREQ[*]} "$(echo "$(echo in)")"
cmd "$(A=1; echo "$A")" "${A-unset}" "$(IFS=-; echo "${FREQ[*]}" -- "${FREQ[@]}")" `echo tick` `echo \\$HOME \\\\x`
""",
    "read": r"""IFS=, read -ra PARTS <<< "a,b,,c"
read -r FIRST REST <<< "one two three"
cmd "${PARTS[@]}" "$FIRST" "$REST"
""",
}


def _bash_argv(snippet: str) -> list[list[str]]:
    prog = "cmd() { printf '%s\\x1f' \"$@\"; printf '\\x1e'; }\n" + snippet
    out = subprocess.run([BASH, "--norc", "--noprofile", "-c", prog], capture_output=True, text=True, timeout=30,
                         env={"PATH": "/usr/bin:/bin"}).stdout
    return [rec.split("\x1f")[:-1] for rec in out.split("\x1e")[:-1]]


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
@pytest.mark.parametrize("name", sorted(ORACLE))
def test_reads_as_bash_does(name):
    snippet = ORACLE[name]
    expect = _bash_argv(snippet)
    run = run_script(snippet)
    got = [c.argv[1:] for c in run.commands if c.argv[0] == "cmd"]
    assert expect, "the oracle printed nothing"
    if name == "arithmetic":  # $GPUS and $NODES are unset: bash reads 0, the reader says it cannot know
        assert got[-1][:2] == expect[-1][:2] and got[-1][2] == "$((GPUS*NODES))" and expect[-1][2] == "0"
        got, expect = got[:-1], expect[:-1]
    assert got == expect


def test_bash_c_and_sbatch_heredoc_are_read_as_scripts():
    text = r"""export OUT=/o
ARGS=(--tensor-model-parallel-size 2 --moe-layer-freq [0]*3+[1]*58)
CMD="cd /m; python /m/pretrain_gpt.py ${ARGS[@]} --save \${OUT}/ckpt"
sbatch <<EOF
#!/bin/bash
#SBATCH --nodes=2
srun --mpi=pmix -l --container-image=img bash -x -c "${CMD}" 2>&1 | tee log
EOF
"""
    run = run_script(text)
    py = [c for c in run.commands if c.argv[0] == "python"]
    assert len(py) == 1
    assert py[0].argv[1:] == ["/m/pretrain_gpt.py", "--tensor-model-parallel-size", "2", "--moe-layer-freq",
                              "[0]*3+[1]*58", "--save", "/o/ckpt"]
    assert py[0].env["OUT"] == "/o" and "bash -c" in py[0].where and "sbatch" in py[0].where


def test_unknowns_are_named_never_run(tmp_path):
    marker = tmp_path / "ran"
    text = f"""X=$(touch {marker}); Y=`touch {marker}`
cmd --master_addr $MASTER_ADDR --save "$1" --x "$X" $Y
if [ "$X" = a ]; then cmd no; fi
if [ -f /etc/hostname ]; then cmd file; fi
if [ -z "$WANDB_KEY" ]; then cmd unset-is-empty; fi
[ $USE_FSDP = 1 ] && cmd fsdp
"""
    run = run_script(text)
    assert not marker.exists()
    cmds = [c.argv[1:] for c in run.commands]
    assert cmds[0] == ["--master_addr", "$MASTER_ADDR", "--save", "$1", "--x", f"$(touch {marker})",
                       f"`touch {marker}`"]
    assert run.commands[0].unknown == [False, False, True, False, True, False, True, True]
    assert cmds[1:] == [["unset-is-empty"]]  # the undecidable ifs are skipped; [ = 1 ] is false, as in bash
    assert run.unresolved == ["$MASTER_ADDR", "$1", "$WANDB_KEY", "$USE_FSDP"]
    assert run.not_run == [f"$(touch {marker})", f"`touch {marker}`"]
    assert sum("cannot decide" in n for n in run.notes) == 2


def test_a_variable_the_script_sets_elsewhere_is_empty_not_unknown():
    run = run_script('if [ "$MODE" = big ]; then EXTRA="--big"; fi\ncmd a $EXTRA b\n')
    assert run.commands[0].argv == ["cmd", "a", "b"] and run.unresolved == ["$MODE"]


def test_unquoted_paren_argument_is_read_with_a_note():
    run = run_script("python pretrain_gpt.py --moe-layer-freq ([0]*3+[1]*58) \\\n  --bf16\n")
    assert run.commands[0].argv[2:] == ["--moe-layer-freq", "([0]*3+[1]*58)", "--bf16"]
    assert any("syntax error" in n for n in run.notes)


def _fast(fn, limit_s: float = 3.0):
    t = time.perf_counter()
    try:
        return fn()
    finally:
        assert time.perf_counter() - t < limit_s


def test_arithmetic_is_instant_and_division_by_zero_stops_like_bash():
    # bash 5.2: -2123029214124047543 7905747460161236407, and 9**9**9**9**9 wraps to a negative exponent
    run = _fast(lambda: run_script("cmd $((9**9**9)) $((7**9223372036854775807))"))
    assert run.commands[0].argv[1:] == ["-2123029214124047543", "7905747460161236407"]
    assert "exponent less than 0" in _fast(lambda: run_script("X=$((9**9**9**9**9))")).stopped.message
    run = run_script("cmd before\nX=$((1/0))\ncmd after\n")
    assert [c.argv for c in run.commands] == [["cmd", "before"]]
    assert isinstance(run.stopped, ScriptStop) and "division by 0" in run.stopped.message
    for bad, why in (("$((2**-1))", "exponent less than 0"), ("$((08))", "value too great for base"),
                     ("$((1 +))", "syntax error")):
        assert why in run_script(f"X={bad}").stopped.message


@pytest.mark.parametrize("text,expect", [
    ("X=$((" + "(" * 5000 + "1" + ")" * 5000 + "))", "nests deeper"),
    ("if true; then " * 2000 + "cmd" + "; fi" * 2000, "nests deeper"),
    ("X=${A:-" * 2000 + "x" + "}" * 2000, "nests deeper"),
    ("f() { f; }; f", "nests deeper"),
    ("X='eval \"$X\"'; eval \"$X\"", "nests deeper"),
    ("A=x; while true; do A=$A$A; done", "grows beyond"),
    ("A=(" + "a " * 100 + "); while true; do A+=(\"${A[@]}\"); done", "grows beyond"),
    ("A=" + "a" * 5000 + "; cmd ${A//*a*a*a*a*a*b/x}", "pattern matching"),
    ("printf -v X '%999999999d' 1", "width or precision"),
    ("A[99999999999]=1", "beyond"),
    ("cmd {1..99999999999}", "brace expansion"),
    ("cmd " + "{a,b}" * 40, "brace expansion"),
    ("x" * 2_000_000, "characters long"),
    ("cmd \x00", "NUL"),
])
def test_hostile_input_is_refused_quickly(text, expect):
    with pytest.raises(PlannerError, match=expect):
        _fast(lambda: run_script(text))


def test_endless_loops_stop_with_a_note():
    run = _fast(lambda: run_script("while true; do X=1; done\nfor ((;;)); do :; done\ncmd after"))
    assert run.commands[0].argv == ["cmd", "after"]
    assert sum(f"{MAX_LOOP:,} iterations" in n for n in run.notes) == 2


@pytest.mark.parametrize("text,where", [
    ("cmd 'open", "never closed"), ('cmd "open', "never closed"), ("cmd $(open", "never closed"),
    ("if true; then cmd", "expected 'fi'"), ("cmd ${X", "never closed"), ("fi", "unexpected 'fi'"),
])
def test_syntax_errors_stop_where_bash_stops(text, where):
    run = run_script("cmd before\n" + text)
    assert [c.argv for c in run.commands] == [["cmd", "before"]]
    assert where in run.stopped.message and "Line 2" in run.stopped.message


def test_only_builtin_substitutions_are_evaluated_the_rest_stays_unrun(tmp_path):
    marker = tmp_path / "ran"
    text = f"""echo() {{ touch {marker}; }}
cmd "$(echo shadowed)" "$(hostname)" "$(echo a | tr a b)" "$(echo a > {marker})" "$(printf -v V x)" "$(echo -e 'a\\tb')"
"""
    run = run_script(text)
    assert not marker.exists()
    assert run.commands[0].argv[1:] == ["$(echo shadowed)", "$(hostname)", "$(echo a | tr a b)",
                                        f"$(echo a > {marker})", "$(printf -v V x)", "$(echo -e 'a\\tb')"]
    assert all(run.commands[0].unknown[1:]) and len(run.not_run) == 6
    # Without the function, the same echo is bash's builtin: read, not listed as unrun.
    run = run_script('cmd "$(echo shadowed)"\n')
    assert run.commands[0].argv[1:] == ["shadowed"] and run.not_run == []


def test_a_builtin_substitution_stays_within_the_bounds():
    body = "$(echo x)"
    for _ in range(200):
        body = f"$(echo {body})"
    with pytest.raises(PlannerError, match="nests deeper"):
        run_script(f"cmd {body}\n")
    with pytest.raises(PlannerError, match="steps"):
        run_script("A=(" + " ".join(["x"] * 50) + ")\ncmd" + ' "$(echo "${A[*]}")"' * 15_000 + "\n")


def test_a_moe_layer_freq_joined_from_an_array_is_read(tmp_path):
    # As public launch scripts write it: the array joined with IFS inside $( ).
    from planner.launchers.megatron.read import job_from_script

    script = tmp_path / "train.sh"
    script.write_text("""#!/bin/bash
MOE_LAYER_FREQ=(0 0 0 1 1 1 1 1)
ARGS=(--num-layers 8 --hidden-size 1024 --num-attention-heads 16 --seq-length 4096 --max-position-embeddings 4096
  --micro-batch-size 1 --global-batch-size 64 --num-experts 8 --moe-router-topk 2 --ffn-hidden-size 4096
  --moe-layer-freq "[$(IFS=', '; echo "${MOE_LAYER_FREQ[*]}")]" --bf16 --vocab-size 32000)
torchrun --nproc-per-node 8 pretrain_gpt.py "${ARGS[@]}"
""")
    job = job_from_script(script, hw="h100")
    assert job.args.values["moe_layer_freq"] == "[0,0,0,1,1,1,1,1]"
    assert job.model.num_moe_layers == 5
