// placeholder until the config layer lands
