# services.buildreport: the server; .runner: a build machine others use over ssh-ng://, recording their builds;
# .collector: the builds of this machine's own Nix daemon. Secrets are files outside the Nix store, handed to
# each service as a systemd credential (LoadCredential), never written into the store or onto a command line.
{ config, lib, pkgs, ... }:

let
  inherit (lib) mkEnableOption mkIf mkMerge mkOption optional optionals types;
  cfg = config.services.buildreport;
  stateDir = "/var/lib/buildreport";
  recorder = "buildreport-runner"; # the SSH user of the runner, owner of the spools and their pushers

  # A secret given as a Nix path, or as a string inside the store, would be world-readable there.
  inStore = value:
    value != null && (builtins.isPath value
      || lib.any (dir: lib.hasPrefix "${dir}/" (toString value)) (lib.unique [ builtins.storeDir "/nix/store" ]));
  secretAssertion = name: value: {
    assertion = !inStore value;
    message = "services.buildreport.${name} is in the Nix store, readable by every user of the machine;"
      + " give the path of a file outside it (as a string, e.g. \"/run/secrets/buildreport\")";
  };

  program = "${cfg.package}/bin/buildreport";
  command = args: lib.escapeShellArgs ([ program ] ++ args);

  # What none of the services needs; systemd-analyze security rates them as exposed "OK".
  hardening = {
    CapabilityBoundingSet = "";
    AmbientCapabilities = "";
    NoNewPrivileges = true;
    ProtectSystem = "strict";
    ProtectHome = true;
    PrivateTmp = true;
    PrivateDevices = true;
    PrivateMounts = true;
    ProtectHostname = true;
    ProtectClock = true;
    ProtectKernelTunables = true;
    ProtectKernelModules = true;
    ProtectKernelLogs = true;
    ProtectControlGroups = true;
    ProtectProc = "invisible";
    RestrictAddressFamilies = [ "AF_UNIX" "AF_INET" "AF_INET6" ];
    RestrictNamespaces = true;
    RestrictRealtime = true;
    RestrictSUIDSGID = true;
    LockPersonality = true;
    MemoryDenyWriteExecute = true;
    RemoveIPC = true;
    SystemCallArchitectures = "native";
    SystemCallFilter = [ "@system-service" "~@privileged" "~@resources" ];
    SystemCallErrorNumber = "EPERM";
    DevicePolicy = "closed";
    UMask = "0077";
  };

  serveArgs = [ "serve" "--create" ]
    ++ (if cfg.databaseUrlFile != null then [ "--db-file" "%d/database-url" ] else [ "--db" cfg.database ])
    ++ [ "--host" cfg.host "--port" (toString cfg.port) ]
    ++ optionals (cfg.publicUrl != null) [ "--public-url" cfg.publicUrl ]
    ++ optionals (cfg.workers != null) [ "--workers" (toString cfg.workers) ]
    ++ optionals (cfg.secretKeyFile != null) [ "--secret-key-file" "%d/secret-key" ]
    ++ optionals (cfg.tls.certFile != null) [ "--tls-cert" "%d/tls-cert" "--tls-key" "%d/tls-key" ]
    ++ optionals (cfg.retention != null) [ "--retention" cfg.retention ]
    ++ cfg.extraArgs;

  credential = name: file: optional (file != null) "${name}:${toString file}";

  runnerCommand = command ([ "runner" "--spool" cfg.runner.spool ]
    ++ optionals (cfg.runner.timeout != null) [ "--timeout" (toString cfg.runner.timeout) ]);

  # `buildreport push --follow` of one spool, as the recorder user that owns it.
  pusher = description: spool: url: tokenFile: {
    inherit description;
    wantedBy = [ "multi-user.target" ];
    wants = [ "network-online.target" ];
    after = [ "network-online.target" ];
    serviceConfig = hardening // {
      ExecStart = command [ "push" "--follow" "--to" url "--token-file" "%d/token" spool ];
      LoadCredential = [ "token:${toString tokenFile}" ];
      User = recorder;
      Group = recorder;
      ReadWritePaths = [ spool ];
      Restart = "always";
      RestartSec = "5s";
    };
  };

  pushOptions = what: {
    pushUrl = mkOption {
      type = types.nullOr types.str;
      default = null;
      example = "https://builds.example.com";
      description = "The buildreport service the ${what}'s builds are pushed to; null: no pusher.";
    };
    pushTokenFile = mkOption {
      type = types.nullOr types.path;
      default = null;
      example = "/run/secrets/buildreport-push-token";
      description = "A file (outside the Nix store) holding a token with the build:write scope.";
    };
  };
in
{
  options.services.buildreport = {
    enable = mkEnableOption "the buildreport server";

    package = mkOption {
      type = types.package;
      default = pkgs.callPackage ./package.nix { };
      defaultText = lib.literalExpression "pkgs.callPackage ./package.nix { }";
      description = "The buildreport package.";
    };

    host = mkOption {
      type = types.str;
      default = "127.0.0.1";
      description = "Address to listen on; 0.0.0.0 (or ::) for every interface.";
    };

    port = mkOption {
      type = types.port;
      default = 8000;
      description = "TCP port to listen on.";
    };

    openFirewall = mkOption {
      type = types.bool;
      default = false;
      description = "Open the port in the firewall.";
    };

    publicUrl = mkOption {
      type = types.nullOr types.str;
      default = null;
      example = "https://builds.example.com";
      description = "Address users reach the service at; signed links start with it.";
    };

    database = mkOption {
      type = types.str;
      default = "${stateDir}/buildreport.db";
      description = "The SQLite database file, in the service's state directory ${stateDir}.";
    };

    databaseUrlFile = mkOption {
      type = types.nullOr types.path;
      default = null;
      example = "/run/secrets/buildreport-database-url";
      description = "A file holding a postgresql:// URL (with its password) to use instead of `database`.";
    };

    secretKeyFile = mkOption {
      type = types.nullOr types.path;
      default = null;
      description = "A file of link signing keys, one a line (the last signs); null: one is generated and kept"
        + " beside the database.";
    };

    tls.certFile = mkOption {
      type = types.nullOr types.path;
      default = null;
      description = "Serve https with this PEM certificate (chain).";
    };

    tls.keyFile = mkOption {
      type = types.nullOr types.path;
      default = null;
      description = "The PEM private key of tls.certFile.";
    };

    workers = mkOption {
      type = types.nullOr (types.ints.between 1 64);
      default = null;
      description = "Server processes; null: the CPU count, at most 4.";
    };

    retention = mkOption {
      type = types.nullOr (types.strMatching "[0-9]+[smhd]");
      default = null;
      example = "400d";
      description = "Builds older than this are deleted once a day; null: kept for ever.";
    };

    extraArgs = mkOption {
      type = types.listOf types.str;
      default = [ ];
      example = [ "--metrics-loopback" "--rate-limit" "6000" ];
      description = "More options of `buildreport serve`.";
    };

    runner = {
      enable = mkEnableOption "a build runner: clients build here over ssh-ng://, and their builds are recorded";

      authorizedKeys = mkOption {
        type = types.listOf types.str;
        default = [ ];
        example = [ "ssh-ed25519 AAAA… ci@example.com" ];
        description = "Public keys of the clients; each may only run `buildreport runner`.";
      };

      spool = mkOption {
        type = types.str;
        default = "/var/spool/buildreport";
        description = "Where the runner spools build records for the pusher.";
      };

      timeout = mkOption {
        type = types.nullOr types.ints.positive;
        default = null;
        description = "Seconds a build may run before Nix stops it (recorded as timeout).";
      };
    } // pushOptions "runner";

    collector = {
      enable = mkEnableOption "recording every build of this machine's Nix daemon from its JSON log";

      socket = mkOption {
        type = types.str;
        default = "/run/buildreport/collect.sock";
        description = "The socket the collector listens on; Nix's json-log-path is set to it.";
      };

      spool = mkOption {
        type = types.str;
        default = "/var/spool/buildreport-collector";
        description = "Where the collector spools build records for its pusher.";
      };
    } // pushOptions "collector";
  };

  config = mkMerge [
    {
      assertions = [
        (secretAssertion "databaseUrlFile" cfg.databaseUrlFile)
        (secretAssertion "secretKeyFile" cfg.secretKeyFile)
        (secretAssertion "tls.keyFile" cfg.tls.keyFile)
        (secretAssertion "runner.pushTokenFile" cfg.runner.pushTokenFile)
        (secretAssertion "collector.pushTokenFile" cfg.collector.pushTokenFile)
        {
          assertion = (cfg.tls.certFile == null) == (cfg.tls.keyFile == null);
          message = "services.buildreport.tls.certFile and tls.keyFile go together: set both (or neither)";
        }
        {
          assertion = cfg.databaseUrlFile != null || lib.hasPrefix "${stateDir}/" cfg.database;
          message = "services.buildreport.database must be a file in ${stateDir} (the only folder the service"
            + " may write); for PostgreSQL give the URL in a file, through databaseUrlFile";
        }
        {
          assertion = !cfg.collector.enable || builtins.match "/run/[^/]+/[^/]+" cfg.collector.socket != null;
          message = "services.buildreport.collector.socket must be a file in a folder of /run, such as"
            + " /run/buildreport/collect.sock (the collector's runtime directory)";
        }
        {
          assertion = (cfg.runner.pushUrl == null) == (cfg.runner.pushTokenFile == null)
            && (cfg.collector.pushUrl == null) == (cfg.collector.pushTokenFile == null);
          message = "services.buildreport: pushUrl and pushTokenFile go together";
        }
      ];
    }

    (mkIf cfg.enable {
      systemd.services.buildreport = {
        description = "buildreport: reports on Nix builds over a JSON API";
        wantedBy = [ "multi-user.target" ];
        wants = [ "network-online.target" ];
        after = [ "network-online.target" "postgresql.service" ];
        serviceConfig = hardening // {
          # READY=1 once every worker serves, then WATCHDOG=1 while /healthz says the database answers.
          Type = "notify";
          NotifyAccess = "main";
          WatchdogSec = "30s";
          TimeoutStartSec = "15min"; # migrations of a large database run before it is ready
          ExecStart = command serveArgs;
          LoadCredential = credential "database-url" cfg.databaseUrlFile
            ++ credential "secret-key" cfg.secretKeyFile
            ++ credential "tls-cert" cfg.tls.certFile
            ++ credential "tls-key" cfg.tls.keyFile;
          DynamicUser = true;
          User = "buildreport";
          StateDirectory = "buildreport";
          StateDirectoryMode = "0700";
          WorkingDirectory = stateDir;
          PrivateUsers = true;
          Restart = "on-failure";
          RestartSec = "5s";
        };
      };
      networking.firewall.allowedTCPPorts = optional cfg.openFirewall cfg.port;
      environment.systemPackages = [ cfg.package ];
    })

    (mkIf (cfg.runner.enable || cfg.collector.enable) {
      users.users.${recorder} = {
        isSystemUser = true;
        group = recorder;
        description = "buildreport runner: records the builds of this machine";
        home = "/var/lib/${recorder}";
        createHome = true;
        useDefaultShell = true; # sshd runs the forced command through the user's shell
      };
      users.groups.${recorder} = { };
    })

    (mkIf cfg.runner.enable {
      # Each client key may run the runner only; it relays the session to the Nix daemon and records builds.
      users.users.${recorder}.openssh.authorizedKeys.keys =
        map (key: ''command="${runnerCommand}",restrict ${key}'') cfg.runner.authorizedKeys;
      nix.settings.trusted-users = [ recorder ];
      services.openssh.enable = true;
      services.openssh.extraConfig = ''
        Match User ${recorder}
          AcceptEnv SERVICE_TAG_*
      '';
      systemd.tmpfiles.rules = [ "d ${cfg.runner.spool} 0700 ${recorder} ${recorder} -" ];
      systemd.services.buildreport-push = mkIf (cfg.runner.pushUrl != null)
        (pusher "buildreport pusher: the runner's recorded builds to the central service"
          cfg.runner.spool cfg.runner.pushUrl cfg.runner.pushTokenFile);
    })

    (mkIf cfg.collector.enable {
      nix.settings.json-log-path = cfg.collector.socket;
      systemd.tmpfiles.rules = [ "d ${cfg.collector.spool} 0700 ${recorder} ${recorder} -" ];
      systemd.services.buildreport-collect = {
        description = "buildreport collector: Nix builds of this machine from Nix's JSON log to the spool";
        wantedBy = [ "multi-user.target" ];
        before = [ "nix-daemon.service" ];
        serviceConfig = hardening // {
          ExecStart = command [ "collect" "--socket" cfg.collector.socket "--spool" cfg.collector.spool ];
          User = recorder;
          Group = recorder;
          RuntimeDirectory = lib.removePrefix "/run/" (builtins.dirOf cfg.collector.socket);
          RuntimeDirectoryPreserve = true;
          ReadWritePaths = [ cfg.collector.spool ];
          PrivateNetwork = true;
          RestrictAddressFamilies = [ "AF_UNIX" ];
          Restart = "always";
          RestartSec = "2s";
        };
      };
      systemd.services.nix-daemon.wants = [ "buildreport-collect.service" ];
      systemd.services.buildreport-collect-push = mkIf (cfg.collector.pushUrl != null)
        (pusher "buildreport pusher: this machine's recorded builds to the central service"
          cfg.collector.spool cfg.collector.pushUrl cfg.collector.pushTokenFile);
    })
  ];
}
