from buildreport.cli import main

main()
