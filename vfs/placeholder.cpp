// placeholder until the vfs layer lands
