from django.db import migrations


class Migration(migrations.Migration):
    """The chain's Interaction is LedgerInteraction (like LedgerModel), in the same table."""

    dependencies = [
        ('chain', '0009_arena_battles'),
    ]

    operations = [
        migrations.AlterModelTable(name='interaction', table='chain_interaction'),
        migrations.RenameModel(old_name='Interaction', new_name='LedgerInteraction'),
    ]
