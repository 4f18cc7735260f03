# Stand-ins for the NixOS options nix/module.nix sets, so that lib.evalModules evaluates it without nixpkgs:
# each takes any value the way NixOS merges it (attribute sets merged, lists joined).
{ lib, ... }:

let
  inherit (lib) mkOption types;
  attrs = mkOption { type = types.attrsOf types.anything; default = { }; };
  list = mkOption { type = types.listOf types.anything; default = [ ]; };
in
{
  options = {
    assertions = list;
    environment.systemPackages = list;
    networking.firewall.allowedTCPPorts = mkOption { type = types.listOf types.port; default = [ ]; };
    nix.settings = mkOption {
      type = types.submodule {
        freeformType = types.attrsOf types.anything;
        options.trusted-users = mkOption { type = types.listOf types.str; default = [ ]; };
      };
      default = { };
    };
    services.openssh = {
      enable = mkOption { type = types.bool; default = false; };
      extraConfig = mkOption { type = types.lines; default = ""; };
    };
    systemd.services = attrs;
    systemd.sockets = attrs;
    systemd.timers = attrs;
    systemd.tmpfiles.rules = mkOption { type = types.listOf types.str; default = [ ]; };
    users.users = attrs;
    users.groups = attrs;
  };
}
