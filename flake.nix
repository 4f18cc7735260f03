{
  description = "buildreport: a self-hostable service that records and reports on Nix builds";

  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-unstable";

  outputs = { self, nixpkgs }:
    let
      systems = [ "x86_64-linux" "aarch64-linux" ];
      forEachSystem = f: nixpkgs.lib.genAttrs systems (system: f nixpkgs.legacyPackages.${system});
    in
    {
      packages = forEachSystem (pkgs: rec {
        buildreport = pkgs.callPackage ./nix/package.nix { };
        default = buildreport;
      });

      # services.buildreport (the server), .runner (an ssh-ng:// build machine) and .collector (this machine's
      # Nix daemon); its package defaults to nix/package.nix built with the system's nixpkgs.
      nixosModules.default = ./nix/module.nix;
      nixosModules.buildreport = self.nixosModules.default;

      overlays.default = final: _prev: { buildreport = final.callPackage ./nix/package.nix { }; };
    };
}
