from buildreport.cli.main import main

main()
