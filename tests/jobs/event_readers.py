#!/usr/bin/env python3
"""Every writer and reader of events.jsonl names only the kinds and fields of the schema.

  event_readers.py HARDY SOURCE_DIR

The schema is `hardy events --schema` (the tables of hardy/resilience/events.hpp as JSON). Checked against it:
- the C++ writers: each `emit("kind", {{"field", ...}, ...})` in the libraries names a declared
  kind and only its declared fields (EventLog::emit checks the calls that the other tests run;
  this reads all of them, those of paths no test takes included);
- the C++ readers (relaunch_plan.cpp, scale_model.cpp, run_progress.cpp, status_command.cpp):
  they name kinds and fields through core::event_kind/event_field, which do not compile with an
  undeclared name; here, no bare `read_field(..., "name")` or `event == "kind"` may bypass that
  with a name the schema lacks;
- the Python readers (tools/run_files.py, tools/report.py, tools/timeline.py): a kind compared with an event's name
  or a key of a table looked up by it, and a field read from an event record (a variable named e,
  event, started or finished) inside the branch or table entry for one kind must belong to that
  kind, outside any such branch to some kind; a field
  of a fixed set of values (failure_detected's detected_by) compared with a string must be
  compared with one of its values.
Before the real files, the checks run on small inputs with one mistake each and must find it.
"""

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

WRITER_DIRS = ("core", "comm", "checkpoint", "resilience", "batch", "slurm", "lsf", "jobs")
CPP_READERS = ("resilience/src/supervisor/relaunch_plan.cpp", "jobs/src/scale_model.cpp",
               "jobs/src/run_progress.cpp", "jobs/src/status_command.cpp")
PY_READERS = ("tools/run_files.py", "tools/report.py", "tools/timeline.py")
EVENT_VARIABLES = {"e", "event", "started", "finished"}
KIND_VARIABLES = {"name"}  # what both tools call an event's kind


class Schema:
    def __init__(self, data):
        # Context fields (a fault domain's index) may stand on a record of any kind, like the
        # envelope's; callers may set them too.
        self.envelope = set(data["envelope"]) | set(data.get("context", {}))
        self.kinds = {kind: set(spec["fields"]) for kind, spec in data["events"].items()}
        self.all_fields = set().union(*self.kinds.values()) | self.envelope
        # The declared values of fields that name one of a fixed set, by field name.
        self.values = {}
        for spec in data["events"].values():
            for name, field in spec["fields"].items():
                if "values" in field:
                    self.values.setdefault(name, set()).update(field["values"])

    def field_problem(self, kinds, field):
        if kinds:
            missing = [k for k in kinds if k in self.kinds and field not in self.kinds[k] | self.envelope]
            return f"field '{field}' is not declared for {', '.join(missing)}" if missing else None
        return None if field in self.all_fields else f"field '{field}' is in no event kind"


def call_text(source, start):
    """The text of the call whose '(' is at `start`, up to its matching ')'."""
    depth = 0
    for i in range(start, len(source)):
        depth += {"(": 1, ")": -1}.get(source[i], 0)
        if depth == 0:
            return source[start:i + 1]
    return source[start:]


def top_level_keys(call):
    """Keys of `{{"a", x}, {"b", y}}`, the field list of an emit call; nested values skipped."""
    keys, depth, i = [], 0, 0
    while i < len(call):
        c = call[i]
        if c == "{":
            depth += 1
            if depth == 2:
                match = re.match(r'\{\s*"(\w+)"\s*,', call[i:])
                if match:
                    keys.append(match.group(1))
        elif c == "}":
            depth -= 1
        elif c == '"':  # skip string literals, which may hold braces
            i = call.index('"', i + 1) if '"' in call[i + 1:] else len(call)
        i += 1
    return keys


def check_writers(schema, files):
    problems = []
    for path, source in files:
        for match in re.finditer(r'\bemit\("(\w+)"', source):
            kind, line = match.group(1), source.count("\n", 0, match.start()) + 1
            if kind not in schema.kinds:
                problems.append(f"{path}:{line}: emits '{kind}', which the schema does not declare")
                continue
            call = call_text(source, match.start() + len("emit"))
            for key in top_level_keys(call[call.index(",") + 1:] if "," in call else ""):
                if (why := schema.field_problem([kind], key)):
                    problems.append(f"{path}:{line}: emit('{kind}'): {why}")
    return problems


def check_cpp_readers(schema, files):
    problems = []
    for path, source in files:
        for match in re.finditer(r'\b(?:event|name)\s*[!=]=\s*"(\w+)"', source):
            if match.group(1) not in schema.kinds:
                line = source.count("\n", 0, match.start()) + 1
                problems.append(f"{path}:{line}: compares with '{match.group(1)}', not an event kind")
        for match in re.finditer(r'read_field<[^;]*?>\(\s*\*?\w+\s*,\s*"(\w+)"\)', source):
            if match.group(1) not in schema.all_fields and "metrics" not in source[max(0, match.start() - 80):match.start()]:
                line = source.count("\n", 0, match.start()) + 1
                problems.append(f"{path}:{line}: reads '{match.group(1)}', a field of no event kind")
    return problems


def is_event_name(node):
    """name, e["event"] or e.get("event"): an expression that holds an event's kind."""
    if isinstance(node, ast.Name):
        return node.id in KIND_VARIABLES
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "event"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        return bool(node.args) and isinstance(node.args[0], ast.Constant) and node.args[0].value == "event"
    return False


def strings(node):
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def kinds_compared(test):
    """The kinds an `if` tests for: name == "x", name in ("x", "y")."""
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.In)):
        left, right = test.left, test.comparators[0]
        if is_event_name(left):
            return strings(right)
        if is_event_name(right):
            return strings(left)
    if isinstance(test, ast.BoolOp):
        for value in test.values:
            if (found := kinds_compared(value)):
                return found
    return []


def read_field_name(node):
    """The field an expression reads from an event record (e["f"], e.get("f")), or None."""
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in EVENT_VARIABLES:
        names = strings(node.slice)
        return names[0] if len(names) == 1 else None
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
            and isinstance(node.func.value, ast.Name) and node.func.value.id in EVENT_VARIABLES and node.args):
        names = strings(node.args[0])
        return names[0] if len(names) == 1 else None
    return None


def kind_tables(tree):
    """The names of the tables looked up by an event's kind (timeline.py's DESCRIBE[e["event"]])."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and is_event_name(node.slice):
            names.add(node.value.id)
        if (isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn))
                and is_event_name(node.left) and isinstance(node.comparators[0], ast.Name)):
            names.add(node.comparators[0].id)
    return names


class PythonReader(ast.NodeVisitor):
    def __init__(self, schema, path, tables=()):
        self.schema, self.path, self.kinds, self.problems = schema, path, [], []
        self.tables = set(tables)

    def report(self, node, text):
        self.problems.append(f"{self.path}:{node.lineno}: {text}")

    def field(self, node, name):
        if (why := self.schema.field_problem(self.kinds, name)):
            self.report(node, why)

    def visit_If(self, node):
        self.visit(node.test)
        kinds = kinds_compared(node.test)
        saved = self.kinds
        if kinds:
            self.kinds = kinds
        for statement in node.body:
            self.visit(statement)
        self.kinds = saved
        for statement in node.orelse:
            self.visit(statement)

    def visit_Compare(self, node):
        for side in [node.left, *node.comparators]:
            if any(is_event_name(other) for other in [node.left, *node.comparators] if other is not side):
                for kind in strings(side):
                    if kind not in self.schema.kinds:
                        self.report(node, f"compares an event with '{kind}', not an event kind")
        # e.get("detected_by") == "watchdog": a value the field declares
        sides = [node.left, *node.comparators]
        for side in sides:
            field = read_field_name(side)
            if field in self.schema.values:
                for other in sides:
                    for value in (strings(other) if other is not side else []):
                        if value not in self.schema.values[field]:
                            self.report(node, f"compares '{field}' with '{value}', not one of its values "
                                              f"{sorted(self.schema.values[field])}")
        # "field" in e
        if (isinstance(node.ops[0], (ast.In, ast.NotIn)) and isinstance(node.comparators[0], ast.Name)
                and node.comparators[0].id in EVENT_VARIABLES):
            for name in strings(node.left):
                self.field(node, name)
        self.generic_visit(node)

    def visit_Subscript(self, node):
        if isinstance(node.value, ast.Name) and node.value.id in EVENT_VARIABLES:
            for name in strings(node.slice):
                self.field(node, name)
        self.generic_visit(node)

    def visit_Call(self, node):
        func = node.func
        if (isinstance(func, ast.Attribute) and func.attr == "get" and isinstance(func.value, ast.Name)
                and func.value.id in EVENT_VARIABLES and node.args):
            for name in strings(node.args[0]):
                self.field(node, name)
        self.generic_visit(node)

    def visit_Assign(self, node):
        # A set of kinds (timeline.py's SHOWN): each must be one.
        if any(isinstance(t, ast.Name) and t.id.isupper() for t in node.targets) and isinstance(node.value, ast.Set):
            for kind in strings(node.value):
                if kind not in self.schema.kinds:
                    self.report(node, f"'{kind}' in {node.targets[0].id} is not an event kind")
        # A table by kind (timeline.py's DESCRIBE): each key must be a kind, and its value reads the
        # fields of that kind, as the branch for one kind does.
        if any(isinstance(t, ast.Name) and t.id in self.tables for t in node.targets) and isinstance(node.value, ast.Dict):
            for key, value in zip(node.value.keys, node.value.values):
                kinds = strings(key) if key is not None else []
                for kind in kinds:
                    if kind not in self.schema.kinds:
                        self.report(key, f"'{kind}' in {node.targets[0].id} is not an event kind")
                saved = self.kinds
                self.kinds = kinds or saved
                self.visit(value)
                self.kinds = saved
            return
        self.generic_visit(node)


def check_python_readers(schema, files):
    problems = []
    for path, source in files:
        tree = ast.parse(source)
        reader = PythonReader(schema, path, kind_tables(tree))
        reader.visit(tree)
        problems += reader.problems
    return problems


def self_test(schema):
    """Each check must find the one mistake in an input made for it."""
    cases = [
        (check_writers, 'events.emit("job_finished", {{"status", s}, {"steps", 1}, {"stepz", 2}});', "stepz"),
        (check_writers, 'events.emit("job_finishd", {{"status", s}});', "job_finishd"),
        (check_cpp_readers, 'if (event == "job_relaunchd") x = read_field<long>(r, "steps");', "job_relaunchd"),
        (check_cpp_readers, 'x = core::read_field<long>(record, "stepz");', "stepz"),
        (check_python_readers, 'if name == "job_started":\n    x = e["world_sise"]\n', "world_sise"),
        (check_python_readers, 'if e.get("event") == "communicator_shrunk":\n    x = e.get("step")\n', "'step'"),
        (check_python_readers, 'SHOWN = {"job_started", "job_sarted"}\n', "job_sarted"),
        (check_python_readers, 'T = {"job_started": lambda e: e["world_sise"]}\nx = T[e["event"]]\n', "world_sise"),
        (check_python_readers, 'T = {"job_sarted": lambda e: 0}\nif e["event"] in T:\n    pass\n', "job_sarted"),
        (check_python_readers, 'if e.get("detected_by") == "watchdgo":\n    pass\n', "watchdgo"),
    ]
    for check, text, expected in cases:
        found = check(schema, [("self-test", text)])
        if len(found) != 1 or expected not in found[0]:
            print(f"event_readers self-test: {check.__name__} on {text!r} found {found}, expected {expected}")
            return False
    return True


def main():
    if len(sys.argv) != 3:
        sys.exit(f"usage: {sys.argv[0]} HARDY SOURCE_DIR")
    hardy, source_dir = sys.argv[1], Path(sys.argv[2])
    result = subprocess.run([hardy, "events", "--schema"], capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        print(f"hardy events --schema exited {result.returncode}: {result.stderr}")
        return 1
    schema = Schema(json.loads(result.stdout))
    if not self_test(schema):
        return 1
    read = lambda paths: [(str(p.relative_to(source_dir)), p.read_text()) for p in paths]
    writers = read(sorted(p for d in WRITER_DIRS for p in (source_dir / d).rglob("*.cpp")))
    problems = (check_writers(schema, writers)
                + check_cpp_readers(schema, read(source_dir / p for p in CPP_READERS))
                + check_python_readers(schema, read(source_dir / p for p in PY_READERS)))
    emits = sum(len(re.findall(r'\bemit\("', text)) for _, text in writers)
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} name(s) not in the event schema (hardy/resilience/events.hpp)")
        return 1
    print(f"event schema: {len(schema.kinds)} kinds; {emits} emit calls, {len(CPP_READERS)} C++ and "
          f"{len(PY_READERS)} Python readers name only declared kinds and fields")
    return 0


if __name__ == "__main__":
    sys.exit(main())
