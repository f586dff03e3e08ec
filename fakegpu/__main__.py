from fakegpu.cli.main import main

main()
