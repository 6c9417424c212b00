"""verify/ is in rooms by stage; each room includes only the rooms before it (README "Layout")."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
ALLOWED = {
    "io": {"io"},
    "judge": {"io", "judge"},
    "report": {"io", "judge", "report"},
    "calibrate": {"io", "judge", "calibrate"},
    "run": {"io", "judge", "report", "run"},
    "bisect": {"io", "judge", "report", "run", "bisect"},
    "cli": {"io", "judge", "report", "calibrate", "run", "bisect", "cli"},
}
INCLUDE = re.compile(r'#include "verify/([a-z_]+)/')


def test_every_verify_source_is_in_a_room():
    loose = [p.name for p in (ROOT / "verify").iterdir() if p.suffix in (".h", ".cpp")]
    assert loose == []
    rooms = {p.name for p in (ROOT / "verify").iterdir() if p.is_dir()} - {"tests"}
    assert rooms == set(ALLOWED)


def test_rooms_include_only_the_rooms_before_them():
    bad = []
    for room, allowed in ALLOWED.items():
        for src in sorted((ROOT / "verify" / room).glob("*")):
            if src.suffix not in (".h", ".cpp"):
                continue
            for used in INCLUDE.findall(src.read_text()):
                if used not in allowed:
                    bad.append(f"verify/{room}/{src.name} includes verify/{used}/")
    assert bad == []
