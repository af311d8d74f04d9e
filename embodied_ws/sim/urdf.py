"""URDF and xacro robot descriptions → an MJCF model, through xacrodoc and MuJoCo's own URDF compiler.

No URDF parser of our own: ``xacrodoc`` (xacro without a ROS install) expands the description and
resolves ``package://`` paths, MuJoCo's URDF compiler (``MjSpec.from_file``) builds the model (fixed
base, joint limits, effort limits as ``actuatorfrcrange``, mimic joints as joint equalities). We only
touch what MuJoCo cannot do itself:

- packages: ``$(find pkg)`` and ``package://pkg`` resolve through ``--package-path`` folders (a folder
  holding ``pkg/package.xml``, or ``pkg/`` itself), ``AMENT_PREFIX_PATH`` (``share/pkg``),
  ``ROS_PACKAGE_PATH``, then the description's own package (an enclosing folder with a
  ``package.xml`` that names ``pkg`` or is named ``pkg``);
- meshes MuJoCo cannot read (COLLADA ``.dae``, ``.ply`` ...) are converted once with ``trimesh`` into a
  cache (``$EMBODIED_WS_CACHE`` or ``~/.cache/embodied_ws``); a visual mesh that cannot be converted
  is dropped with a note, a collision mesh that cannot be read is an error;
- the servos, home pose and end effector are added by :mod:`embodied_ws.sim.robot_defaults`.

The generated MJCF (``robot.xml`` next to a ``conversion.json`` of notes in the cache) is what
training simulates; ``embodied-ws train`` copies it into the run folder.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.dom import minidom

import mujoco

from embodied_ws.core.atomic import write_bytes_atomic
from embodied_ws.core.errors import ModelError

#: file endings of robot descriptions handled here (``.urdf.xacro`` ends with ``.xacro``)
DESCRIPTION_SUFFIXES = (".urdf", ".xacro")
#: mesh formats MuJoCo reads itself
MUJOCO_MESHES = (".stl", ".obj", ".msh")


def is_description(path: str) -> bool:
    """Whether ``path`` names a URDF or xacro file (by its ending)."""
    return path.lower().endswith(DESCRIPTION_SUFFIXES)


def cache_dir() -> Path:
    """Where converted meshes and generated MJCF files are kept."""
    env = os.environ.get("EMBODIED_WS_CACHE")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "embodied_ws"


@dataclass
class Description:
    """A robot description expanded to URDF, with what MuJoCo's compiler does not keep.

    :param source: the URDF/xacro file
    :param urdf: expanded URDF text, mesh paths absolute and readable by MuJoCo
    :param commanded: joints with a ros2_control command interface (None: no ros2_control block)
    :param velocity: joint velocity limits from ``<limit velocity=...>`` (rad/s or m/s)
    :param notes: what was changed on the way (dropped or converted meshes)
    """

    source: Path
    urdf: str
    commanded: list[str] | None = None
    velocity: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------- packages
def _package_name(folder: Path) -> str | None:
    xml = folder / "package.xml"
    if not xml.is_file():
        return None
    try:
        names = minidom.parse(str(xml)).getElementsByTagName("name")
    except Exception:  # a broken package.xml: fall back to the folder name
        return None
    return names[0].firstChild.data.strip() if names and names[0].firstChild else None


def package_map(package_paths: list[str] | tuple[str, ...] = ()) -> dict[str, Path]:
    """Package name → folder, from ``ROS_PACKAGE_PATH``, ``AMENT_PREFIX_PATH`` and ``package_paths``
    (later sources win, so ``--package-path`` overrides the environment).

    A folder counts as package ``pkg`` when its ``package.xml`` names it, or when it is ``DIR/pkg``
    (ament's ``share/pkg`` layout, or a package without a manifest under a ``--package-path`` DIR).
    """
    found: dict[str, Path] = {}

    def scan(root: Path, depth: int) -> None:
        if not root.is_dir():
            return
        name = _package_name(root)
        if name:
            found[name] = root
            return
        if depth == 0:
            return
        for child in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
            found.setdefault(child.name, child)
            scan(child, depth - 1)

    for entry in os.environ.get("ROS_PACKAGE_PATH", "").split(os.pathsep):
        if entry:
            scan(Path(entry), 3)
    for prefix in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep):
        share = Path(prefix) / "share"
        if prefix and share.is_dir():
            for child in share.iterdir():
                if child.is_dir():
                    found[child.name] = child
    for entry in package_paths:
        scan(Path(entry).expanduser().resolve(), 3)
    return found


# ----------------------------------------------------------------------------- xacro → URDF
def expand(
    path: Path, args: dict[str, str] | None = None, package_paths: list[str] | tuple[str, ...] = ()
) -> Description:
    """Expand a URDF/xacro file with xacrodoc: arguments applied, ``$(find)``/``package://`` resolved.

    Errors (missing package, xacro error, missing mesh) raise a one-line :class:`ModelError` naming
    the file.

    :param path: the ``.urdf`` or ``.urdf.xacro`` file
    :param args: xacro arguments (``name: value``)
    :param package_paths: extra folders holding packages
    """
    if not path.is_file():
        raise ModelError("robot description not found", str(path))
    try:
        import xacrodoc
        from xacrodoc import packages
    except ImportError:
        raise ModelError("reading URDF/xacro needs xacrodoc: pip install xacrodoc", str(path)) from None
    known = package_map(package_paths)
    packages.reset()
    packages.walk_up_from(path)  # the description's own package, found from its folder

    def lookup(pkg: str) -> str:
        if pkg in known:
            return str(known[pkg])
        for folder in path.resolve().parents:  # the description sits inside a package folder named pkg
            if folder.name == pkg and (folder / "package.xml").is_file():
                return str(folder)
        raise packages.PackageNotFoundError(pkg)

    # xacrodoc has no public call to drop its default ament/rospkg look-ups, and ament's fails with an
    # unrelated message when AMENT_PREFIX_PATH is unset; package_map() already covers both sources
    packages._finder.finder_funcs = [(lookup, packages.PackageNotFoundError), *packages._finder.finder_funcs[:1]]
    try:
        doc = xacrodoc.XacroDoc.from_file(str(path), subargs=dict(args or {}), walk_up=False)
    except Exception as exc:  # xacro raises XacroException, NameError, ExpatError ... for a bad file
        missing = re.search(r"Package not found: ([\w-]+)", str(exc))
        if missing:  # $(find pkg) failures reach us wrapped in xacro's own exception
            raise ModelError(
                f"package {missing.group(1)!r} not found (add --package-path DIR, or set AMENT_PREFIX_PATH "
                "/ ROS_PACKAGE_PATH)",
                str(path),
            ) from None
        raise ModelError(f"xacro: {_first_line(exc)}", str(path)) from None
    desc = Description(source=path, urdf="")
    _read_control(doc.dom, desc)
    _fix_meshes(doc.dom, path, desc)
    desc.urdf = doc.dom.toxml()
    return desc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def _read_control(dom: minidom.Document, desc: Description) -> None:
    """ros2_control command interfaces and URDF velocity limits (MuJoCo keeps neither)."""
    blocks = dom.getElementsByTagName("ros2_control")
    if blocks:
        desc.commanded = []
        for block in blocks:
            for joint in block.getElementsByTagName("joint"):
                if joint.getElementsByTagName("command_interface"):
                    desc.commanded.append(joint.getAttribute("name"))
    for joint in dom.getElementsByTagName("joint"):
        for limit in joint.getElementsByTagName("limit"):
            vel = limit.getAttribute("velocity")
            if vel and joint.getAttribute("name"):
                with contextlib.suppress(ValueError):  # a xacro expression left unevaluated: no limit
                    desc.velocity[joint.getAttribute("name")] = float(vel)


def _fix_meshes(dom: minidom.Document, source: Path, desc: Description) -> None:
    """Make every mesh path absolute and readable by MuJoCo (converting other formats with trimesh)."""
    for mesh in list(dom.getElementsByTagName("mesh")):
        raw = mesh.getAttribute("filename")
        if not raw:
            continue
        file = raw.removeprefix("file://")
        if "://" in file:
            raise ModelError(f"cannot resolve mesh {raw!r}", str(source))
        mesh_path = Path(file) if Path(file).is_absolute() else (source.parent / file)
        role = _role(mesh)
        if not mesh_path.is_file():
            raise ModelError(f"mesh file not found: {mesh_path}", str(source))
        if mesh_path.suffix.lower() not in MUJOCO_MESHES:
            converted = _convert_mesh(mesh_path)
            if converted is None:
                if role == "collision":
                    raise ModelError(f"cannot read collision mesh {mesh_path.name} (trimesh failed)", str(source))
                element = _ancestor(mesh, "visual")
                element.parentNode.removeChild(element)
                note = f"dropped visual mesh {mesh_path.name}: trimesh cannot convert it"
                if note not in desc.notes:
                    desc.notes.append(note)
                continue
            note = f"converted {mesh_path.name} to {converted.name} with trimesh"
            if note not in desc.notes:
                desc.notes.append(note)
            mesh_path = converted
        mesh.setAttribute("filename", str(mesh_path.resolve()))


def _role(node: Any) -> str:
    while node is not None and getattr(node, "tagName", None) not in ("visual", "collision"):
        node = node.parentNode
    return node.tagName if node is not None else "visual"


def _ancestor(node: Any, tag: str) -> Any:
    while node.parentNode is not None and getattr(node, "tagName", None) != tag:
        node = node.parentNode
    return node


def _convert_mesh(path: Path) -> Path | None:
    """Convert a mesh to STL once (cached by content hash); None when trimesh cannot read it."""
    digest = hashlib.sha1(path.read_bytes()).hexdigest()[:16]
    out = cache_dir() / "meshes" / f"{path.stem}-{digest}.stl"
    if out.is_file():
        return out
    try:
        import trimesh

        mesh = trimesh.load(str(path), force="mesh")
        if len(mesh.faces) == 0:
            return None
        data = mesh.export(file_type="stl")
    except Exception:  # missing pycollada, a broken file, a scene without geometry
        return None
    write_bytes_atomic(out, data)
    return out


# ----------------------------------------------------------------------------- URDF → MjSpec
def to_spec(desc: Description) -> mujoco.MjSpec:
    """Build the MuJoCo spec with MuJoCo's URDF compiler (static bodies kept as frames, visuals kept)."""
    dom = minidom.parseString(desc.urdf)
    robot = dom.documentElement
    for old in robot.getElementsByTagName("mujoco"):
        robot.removeChild(old)
    ext = dom.createElement("mujoco")
    compiler = dom.createElement("compiler")
    # keep fixed links (tool/flange frames) as bodies, keep visual geoms for rendering, keep our absolute paths
    for key, value in (("fusestatic", "false"), ("discardvisual", "false"), ("strippath", "false")):
        compiler.setAttribute(key, value)
    ext.appendChild(compiler)
    robot.appendChild(ext)
    with tempfile.TemporaryDirectory() as tmp:
        urdf = Path(tmp) / "robot.xml"  # MuJoCo tells URDF from MJCF by the root element
        urdf.write_text(dom.toxml())
        try:
            spec = mujoco.MjSpec.from_file(str(urdf))
            spec.compile()
        except Exception as exc:
            raise ModelError(f"MuJoCo cannot build the robot: {_first_line(exc)}", str(desc.source)) from None
    return spec


def parse_args(items: list[str] | tuple[str, ...]) -> dict[str, str]:
    """``["name:=value", ...]`` → ``{name: value}`` (xacro's own argument syntax)."""
    out = {}
    for item in items:
        if ":=" not in item:
            raise ModelError(f"expected NAME:=VALUE, got {item!r}", "--robot-arg")
        key, value = item.split(":=", 1)
        out[key.strip()] = value
    return out


def generate_mjcf(
    path: str | Path, args: dict[str, str] | None = None, package_paths: list[str] | tuple[str, ...] = ()
) -> tuple[str, list[str]]:
    """The MJCF text of a URDF/xacro description with servos and a ``home`` keyframe, and the notes.

    Converted once per process and arguments (the result is memoized; meshes are cached on disk).

    :param path: the ``.urdf`` or ``.urdf.xacro`` file
    :param args: xacro arguments
    :param package_paths: extra folders holding packages
    """
    p = Path(path).expanduser().resolve()
    if not p.is_file():
        raise ModelError("robot description not found", str(path))
    key = (str(p), tuple(sorted((args or {}).items())), tuple(package_paths), p.stat().st_mtime_ns)
    xml, notes = _generate(*key)
    return xml, list(notes)


@functools.lru_cache(maxsize=8)
def _generate(path: str, args: tuple, package_paths: tuple, mtime: int) -> tuple[str, tuple[str, ...]]:
    from embodied_ws.sim import robot_defaults as rd

    source = Path(path)
    desc = expand(source, dict(args), package_paths)
    spec = to_spec(desc)
    model = spec.compile()
    movable = [j for j in range(model.njnt) if int(model.jnt_type[j]) in rd.MOVABLE]
    if not movable:
        raise ModelError("the description has no movable joint: nothing to control", str(source))
    driven = rd.followers(model)
    names = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, j) for j in movable]
    commanded = [j for j, n in zip(movable, names, strict=True) if j not in driven]
    if desc.commanded is not None:
        commanded = [j for j, n in zip(movable, names, strict=True) if n in desc.commanded and j not in driven]
        if not commanded:
            raise ModelError("its ros2_control block commands none of the movable joints", str(source))
        passive = [n for j, n in zip(movable, names, strict=True) if j not in commanded and j not in driven]
        if passive:
            desc.notes.append(f"not commanded by ros2_control (passive): {', '.join(passive)}")
    ee = rd.detect_ee(model)
    arm = rd.arm_joints(model, ee) if ee else []
    home = rd.home_pose(model, arm, ee) if arm else rd.rest_pose(model)
    rd.add_servos(spec, model, commanded, home, desc.velocity)
    rd.set_home_key(spec, spec.compile(), home)
    header = [
        f"Generated by embodied_ws from {source}" + (f" with {dict(args)}" if args else ""),
        "position servos: kp = I*(2*pi*10 Hz)^2, kv = 2*I*(2*pi*10 Hz), I = joint-space inertia at home;",
        "force range = URDF effort limit; bodies have gravity compensation (see embodied_ws/sim/robot_defaults.py)",
        *desc.notes,
    ]
    spec.comment = "\n".join(header)
    try:
        spec.compile()
    except Exception as exc:
        raise ModelError(f"MuJoCo cannot build the robot: {_first_line(exc)}", str(source)) from None
    return spec.to_xml(), tuple(desc.notes)


def save_generated_model(run_dir: Path, cfg: Any) -> Path | None:
    """Write the MJCF generated from a URDF/xacro robot to ``run_dir/robot.xml`` (what was simulated,
    for the user to read or edit); nothing for an MJCF robot.

    :param run_dir: the run folder
    :param cfg: the run configuration (``env.robot``, ``env.robot_args``, ``env.package_paths``)
    """
    if not is_description(cfg.env.robot):
        return None
    xml, _ = generate_mjcf(cfg.env.robot, parse_args(cfg.env.robot_args), cfg.env.package_paths)
    out = run_dir / "robot.xml"
    write_bytes_atomic(out, xml.encode())
    return out
