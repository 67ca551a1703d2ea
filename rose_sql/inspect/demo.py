"""An inspect_ai task on the bundled demo database: a model writes SQL, ROSE scores it.

The 40 questions of ``rose demo`` (a made-up cycling league) with their gold SQL; the model under
evaluation gets the schema and a question and answers with one SQLite query; :func:`rose_scorer`
judges it, its judges taken from the ``grader`` role (else the model under evaluation)::

    inspect eval rose_sql/inspect/demo.py --model openai/gpt-4o-mini --model-role grader=openai/o3

The database is written under ``db_root`` (default: the system's temporary folder), the same bytes on
every build.
"""

from __future__ import annotations

import os
import tempfile
from importlib import resources
from pathlib import Path

from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset
from inspect_ai.solver import generate, system_message

from rose_sql.config import DEMO_MAX_STEPS, Config
from rose_sql.demo import DB_ID, load_demo_items
from rose_sql.demo.build import build_database
from rose_sql.inspect.scorer import rose_scorer, sql_sample

SYSTEM_PROMPT = """You write SQLite queries for questions about this database.

{schema}

Answer the user's question with one SQLite query, in a ```sql code block."""


def demo_database(db_root: Path) -> Path:
    """Build the demo database as ``db_root/<db_id>/<db_id>.sqlite`` (atomically: a reader never sees half)."""
    final = db_root / DB_ID / f"{DB_ID}.sqlite"
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=final.parent, suffix=".building")
    os.close(fd)
    build_database(Path(name))
    os.replace(name, final)
    return final


@task
def rose_demo(db_root: str | None = None, evidence: bool = True) -> Task:
    """The demo's questions, answered by the model under evaluation and scored by ROSE."""
    root = Path(db_root) if db_root else Path(tempfile.gettempdir()) / "rose-sql-inspect-demo"
    demo_database(root)
    schema = resources.files("rose_sql.demo").joinpath("schema.sql").read_text(encoding="utf-8")
    samples = [
        sql_sample(
            it.question,
            it.gold_sql,
            DB_ID,
            evidence=it.evidence,
            id=it.id,
            metadata={"kind": it.kind, "expert": it.expert},
        )
        for it in load_demo_items()
    ]
    prompt = SYSTEM_PROMPT.replace("{schema}", schema.replace("{", "{{").replace("}", "}}"))
    return Task(
        dataset=MemoryDataset(samples, name="rose-demo"),
        solver=[system_message(prompt), generate()],
        scorer=rose_scorer(root, config=Config(max_steps=DEMO_MAX_STEPS), evidence=evidence),
    )
