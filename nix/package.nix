# buildreport as a Nix package: the `buildreport` program with the Python libraries of pyproject.toml.
{ lib, python3Packages }:

let
  pyproject = lib.importTOML ../pyproject.toml;
in
python3Packages.buildPythonApplication {
  pname = "buildreport";
  inherit (pyproject.project) version;
  pyproject = true;

  # The checkout without what git ignores: the package changes only when the sources do.
  src = lib.cleanSourceWith {
    src = lib.cleanSource ../.;
    filter = path: type: !(lib.hasSuffix ".venv" path || lib.hasSuffix "/bench/data" path);
  };

  build-system = [ python3Packages.setuptools ];

  # One for each of pyproject.toml's `dependencies` (uvicorn[standard] brings uvloop, httptools, watchfiles …).
  dependencies = with python3Packages; [
    litestar
    msgspec
    aiosqlite
    itsdangerous
    uvicorn
    uvloop
    httptools
    click
    rich
    jinja2
    httpx
    prometheus-client
    psycopg
    psycopg-pool
    pyjwt
    cryptography
  ];

  pythonImportsCheck = [ "buildreport" "buildreport.cli.main" ];
  # The test suite needs PostgreSQL, Chromium, sshd and Nix itself: `make test` runs it outside the sandbox.
  doCheck = false;

  meta = {
    description = pyproject.project.description;
    license = lib.licenses.mit;
    mainProgram = "buildreport";
    platforms = lib.platforms.linux;
  };
}
