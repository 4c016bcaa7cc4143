from hf_plm_ext_cli.main import main

main()
