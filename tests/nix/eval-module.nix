# Evaluates nix/module.nix with the option values in `settings` (a module) and the stand-ins of nixos-stubs.nix;
# the package is a stand-in too, whose program is FAKE_PACKAGE/bin/buildreport.
{ lib, settings }:

let
  package = { type = "derivation"; name = "buildreport"; outPath = "/fake-package"; };
  evaluated = lib.evalModules {
    modules = [
      ./nixos-stubs.nix
      ../../nix/module.nix
      { _module.args.pkgs = { }; services.buildreport.package = package; }
      settings
    ];
  };
  config = evaluated.config;
in
{
  failedAssertions = map (a: a.message) (lib.filter (a: !a.assertion) config.assertions);
  services = config.systemd.services;
  tmpfiles = config.systemd.tmpfiles.rules;
  users = lib.mapAttrs (_: user: removeAttrs user [ ]) config.users.users;
  nixSettings = config.nix.settings;
  firewall = config.networking.firewall.allowedTCPPorts;
  sshExtraConfig = config.services.openssh.extraConfig;
}
