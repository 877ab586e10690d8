from specreplay.cli import main

main()
